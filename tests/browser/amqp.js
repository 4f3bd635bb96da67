// The browser side of test_browser_amqp.py.  Query parameters: url (ws://.../amqp), queue
// to receive from, user and password (PLAIN when a password is given, else ANONYMOUS).
// window.sendTo(address, body) resolves with the node's outcome for the transfer;
// window.amqpTest holds what the page received, for the test to read.
(function () {
  'use strict';
  const params = new URLSearchParams(window.location.search);
  const url = params.get('url');
  const queue = params.get('queue');
  const user = params.get('user') || 'anonymous';
  const password = params.get('password');
  const state = { ready: false, server: null, offered: [], received: [], errors: [],
                  closed: false };
  window.amqpTest = state;

  const byId = (id) => document.getElementById(id);
  const show = (kind, text) => {
    const li = document.createElement('li');
    li.className = kind;
    li.textContent = text;
    byId('log').appendChild(li);
  };
  const brief = (body) => (body.length > 60 ? body.length + ' characters' : body);
  byId('url').textContent = url;
  byId('sasl').textContent = password ? 'PLAIN as ' + user : 'ANONYMOUS';
  byId('queue').textContent = queue;

  const container = rheaUmd.create_container({ id: 'browser-' + Date.now() });
  const ws = container.websocket_connect(window.WebSocket);
  const options = { connection_details: ws(url, ['amqp']), reconnect: false, username: user };
  if (password) options.password = password;
  const connection = container.connect(options);

  connection.on('connection_open', (context) => {
    const open = context.connection.remote.open;
    state.server = open.container_id;
    state.offered = [].concat(open.offered_capabilities || []).map(String);
    byId('protocol').textContent = window.wsRecord[0].protocol;
    byId('status').textContent = 'connected to ' + state.server;
  });
  connection.on('receiver_open', () => {
    show('info', 'receiving from ' + queue);
    state.ready = true;
  });
  connection.on('message', (context) => {
    const m = context.message;
    const body = typeof m.body === 'string' ? m.body : String(m.body);
    const userId = m.user_id === undefined ? null : String(m.user_id);
    state.received.push({ address: context.receiver.source.address, body: body,
                          subject: m.subject || null, userId: userId });
    show('message', 'received from ' + queue + ': ' + brief(body));
  });
  const failed = (context) => {
    const e = context.error || (context.connection && context.connection.error);
    const text = e ? (e.condition || '') + ' ' + (e.description || e.message || e) : 'error';
    state.errors.push(text);
    show('error', text);
  };
  connection.on('connection_error', failed);
  connection.on('receiver_error', failed);
  connection.on('sender_error', failed);
  connection.on('disconnected', (context) => {
    state.closed = true;
    if (context.error) failed(context);
  });
  connection.on('connection_close', () => { state.closed = true; });
  connection.open_receiver({ source: queue, credit_window: 20 });

  const senders = {};
  const outcomes = new Map();  // delivery -> resolve(outcome name)
  const settled = (name) => (context) => {
    const resolve = outcomes.get(context.delivery);
    outcomes.delete(context.delivery);
    if (resolve) resolve(name);
  };
  const sender = (address) => {
    if (!senders[address]) {
      senders[address] = new Promise((resolve) => {
        const s = connection.open_sender({ target: address });
        ['accepted', 'rejected', 'released', 'modified'].forEach((n) => s.on(n, settled(n)));
        s.once('sendable', () => resolve(s));
      });
    }
    return senders[address];
  };
  window.sendTo = (address, body, subject) => sender(address).then((s) => new Promise((resolve) => {
    outcomes.set(s.send({ body: body, subject: subject }), resolve);
    show('sent', 'sent to ' + address + ': ' + brief(body));
  }));
  window.stopAmqp = () => connection.close();
  window.note = (text) => show('info', text);
})();
