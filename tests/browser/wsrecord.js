// Loaded before a client library: window.WebSocket becomes a subclass that records, for
// each socket, the subprotocols asked for, the one the server chose, and how many text
// and binary messages arrived, so a test can check the negotiation and the frame types.
(function () {
  'use strict';
  const Native = window.WebSocket;
  const sockets = [];
  window.wsRecord = sockets;
  class Recorded extends Native {
    constructor(url, protocols) {
      super(url, protocols);
      const rec = { url: String(url), asked: [].concat(protocols || []), protocol: null,
                    text: 0, binary: 0, close: null };
      sockets.push(rec);
      this.addEventListener('open', () => { rec.protocol = this.protocol; });
      this.addEventListener('message', (e) => {
        if (typeof e.data === 'string') rec.text++; else rec.binary++;
      });
      this.addEventListener('close', (e) => { rec.close = e.code; });
    }
  }
  window.WebSocket = Recorded;
})();
