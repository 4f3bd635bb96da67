// The browser side of test_browser_mqtt.py.  Query parameters: url (ws://.../mqtt),
// version (3 for 3.1, "MQIsdp", which MQTT.js offers as subprotocol mqttv3.1; 4 for 3.1.1;
// 5), filter to subscribe to at QoS 1 (a wildcard).
// window.publish(topic, body, qos) resolves once the node has the message (PUBACK for
// QoS 1); window.mqttTest holds the CONNACK, the granted QoS and what the page received.
(function () {
  'use strict';
  const params = new URLSearchParams(window.location.search);
  const url = params.get('url');
  const version = Number(params.get('version') || '4');
  const filter = params.get('filter');
  const state = { ready: false, connack: null, granted: null, received: [], errors: [],
                  closed: false };
  window.mqttTest = state;

  const byId = (id) => document.getElementById(id);
  const show = (kind, text) => {
    const li = document.createElement('li');
    li.className = kind;
    li.textContent = text;
    byId('log').appendChild(li);
  };
  byId('url').textContent = url;
  byId('version').textContent = { 3: '3.1', 4: '3.1.1', 5: '5.0' }[version];
  byId('filter').textContent = filter;

  const client = mqtt.connect(url, {
    protocolVersion: version,
    protocolId: version === 3 ? 'MQIsdp' : 'MQTT',
    clientId: 'browser-v' + version + '-' + Date.now(),
    clean: true,
    reconnectPeriod: 0,
    connectTimeout: 5000,
  });
  client.on('connect', (connack) => {
    state.connack = { sessionPresent: connack.sessionPresent,
                      code: version === 5 ? connack.reasonCode : connack.returnCode };
    byId('protocol').textContent = window.wsRecord[0].protocol;
    byId('status').textContent = 'connected (CONNACK ' + state.connack.code + ')';
    client.subscribe(filter, { qos: 1 }, (err, granted) => {
      if (err) return state.errors.push('subscribe: ' + err.message);
      state.granted = granted.map((g) => g.qos);
      show('info', 'subscribed to ' + filter + ' (granted QoS ' + state.granted + ')');
      state.ready = true;
    });
  });
  client.on('message', (topic, payload, packet) => {
    const props = (packet.properties && packet.properties.userProperties) || null;
    state.received.push({ topic: topic, body: payload.toString(), qos: packet.qos,
                          userProperties: props });
    show('message', 'received on ' + topic + ' (QoS ' + packet.qos + '): ' + payload);
  });
  client.on('error', (e) => {
    state.errors.push(e.message);
    show('error', e.message);
  });
  client.on('close', () => { state.closed = true; });

  window.publish = (topic, body, qos, userProperties) => new Promise((resolve) => {
    const opts = { qos: qos };
    if (userProperties) opts.properties = { userProperties: userProperties };
    client.publish(topic, body, opts, (err) => {
      if (err) state.errors.push('publish: ' + err.message);
      show('sent', 'sent to ' + topic + ' (QoS ' + qos + '): ' + body);
      resolve(err ? err.message : 'ok');
    });
  });
  window.stopMqtt = () => client.end();
  window.note = (text) => show('info', text);
})();
