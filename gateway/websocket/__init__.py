"""WebSocket endpoints: STOMP now (``v10.stomp``, ``v11.stomp``, ``v12.stomp``); MQTT and AMQP
mount beside it later."""
