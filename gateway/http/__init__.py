"""The HTTP listener: REST messaging, WebSocket, the HTTP tunnel and SockJS on one port."""
