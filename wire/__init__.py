"""Sans-I/O wire codecs shared by the gateway (server side) and the bridges and clients
(client side): bytes in, events out, no sockets and no event loop."""
