// The browser side of test_browser_stomp.py.  Query parameters: mode=ws (STOMP over a
// native WebSocket at url) or mode=sockjs (through sockjs-client at url, optionally limited
// to transports=a,b); queue and topic to subscribe to.  The page shows every message it
// sends and receives; window.stompTest holds the same for the test to read.
(function () {
  'use strict';
  const params = new URLSearchParams(window.location.search);
  const mode = params.get('mode') || 'ws';
  const url = params.get('url');
  const queue = params.get('queue');
  const topic = params.get('topic');
  const transports = params.get('transports');
  const state = { ready: false, transport: null, received: [], errors: [], closes: [] };
  window.stompTest = state;

  const byId = (id) => document.getElementById(id);
  const show = (kind, text) => {
    const li = document.createElement('li');
    li.className = kind;
    li.textContent = text;
    byId('log').appendChild(li);
  };
  byId('mode').textContent = mode;
  byId('url').textContent = url;
  byId('route').textContent = params.get('route') || 'direct';

  let sock = null;
  const client = new StompJs.Client({
    reconnectDelay: 0,
    debug: (line) => console.debug(line),
    onConnect: (frame) => {
      state.transport = sock ? 'sockjs: ' + sock.transport : 'native websocket';
      byId('transport').textContent = state.transport;
      byId('status').textContent = 'connected to ' + frame.headers.server;
      let pending = 2;
      [queue, topic].forEach((destination, i) => {
        const receipt = 'sub-' + i;
        client.watchForReceipt(receipt, () => {
          show('info', 'subscribed to ' + destination);
          if (--pending === 0) state.ready = true;
        });
        client.subscribe(destination, (m) => {
          state.received.push({ destination: destination, body: m.body });
          show('message', 'received on ' + destination + ': ' + m.body);
        }, { receipt: receipt });
      });
    },
    onStompError: (frame) => {
      state.errors.push(frame.headers.message);
      show('error', 'ERROR: ' + frame.headers.message);
    },
    onWebSocketClose: (event) => state.closes.push(event.code),
  });
  if (mode === 'sockjs') {
    client.webSocketFactory = () => {
      sock = new SockJS(url, null, transports ? { transports: transports.split(',') } : {});
      return sock;
    };
  } else {
    client.brokerURL = url;
  }

  window.sendTo = (destination, body) => {
    client.publish({ destination: destination, body: body });
    show('sent', 'sent to ' + destination + ': ' + body);
  };
  window.stopStomp = () => client.deactivate();
  window.note = (text) => show('info', text);
  client.activate();
})();
