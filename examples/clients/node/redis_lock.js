// A Redis lock in Node.js, no packages: a leaseproof client written from
// docs/client-protocol.md alone. SET key value NX PX ttl to acquire,
// compare-and-delete (a Lua script) to release, no keep-alive; the rows go
// to PostgreSQL through `psql`, a connection of the client's own.
'use strict';
const net = require('net');
const readline = require('readline');
const { execFile } = require('child_process');

const send = (message) => process.stdout.write(JSON.stringify(message) + '\n');

// RESP over one connection, one command at a time.
function redisClient(url) {
  const parsed = new URL(url);
  const socket = net.connect(Number(parsed.port || 6379), parsed.hostname);
  let buffer = Buffer.alloc(0);
  const waiting = [];
  const parse = (text, at) => {
    const end = text.indexOf('\r\n', at);
    if (end < 0) return null;
    const kind = text[at], line = text.slice(at + 1, end);
    if (kind === '+' || kind === ':') return { value: kind === ':' ? Number(line) : line, next: end + 2 };
    if (kind === '-') return { value: new Error(line), next: end + 2 };
    if (kind === '$') {
      const length = Number(line);
      if (length < 0) return { value: null, next: end + 2 };
      if (text.length < end + 2 + length + 2) return null;
      return { value: text.slice(end + 2, end + 2 + length), next: end + 2 + length + 2 };
    }
    throw new Error('unexpected RESP ' + kind);
  };
  socket.on('data', (chunk) => {
    buffer = Buffer.concat([buffer, chunk]);
    for (;;) {
      const reply = parse(buffer.toString('latin1'), 0);
      if (reply === null) return;
      buffer = buffer.subarray(reply.next);
      const { resolve, reject } = waiting.shift();
      reply.value instanceof Error ? reject(reply.value) : resolve(reply.value);
    }
  });
  const failAll = (error) => { while (waiting.length) waiting.shift().reject(error); };
  socket.on('error', failAll);
  socket.on('close', () => failAll(new Error('connection closed')));
  const command = (...args) => new Promise((resolve, reject) => {
    waiting.push({ resolve, reject });
    socket.write(`*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join(''));
  });
  if (parsed.password) command('AUTH', decodeURIComponent(parsed.password)).catch(() => {});
  return command;
}

const RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
const redis = redisClient(process.env.LEASEPROOF_REDIS_URL);
const held = new Map(); // table -> our value

function psql(sql) {
  return new Promise((resolve, reject) => {
    execFile('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', process.env.LEASEPROOF_DATABASE_URL, '-c', sql],
      (error, stdout, stderr) => (error ? reject(new Error(stderr || error.message)) : resolve(stdout)));
  });
}

const handlers = {
  async acquire(r) {
    const value = `${r.owner}:${Math.random()}`;
    if ((await redis('SET', 'node:' + r.table, value, 'NX', 'PX', r.ttl_ms)) !== 'OK') return { fail: 'held' };
    held.set(r.table, value);
    return { lifetime_ms: r.ttl_ms };
  },
  async write(r) {
    if (!held.has(r.table)) return { fail: 'stale' };
    const quote = (s) => "'" + String(s).replace(/'/g, "''") + "'";
    const token = r.token === null ? 'NULL' : Number(r.token);
    const rows = Array.from({ length: r.items }, (_, item) =>
      `(${quote(r.table)}, ${quote(r.owner)}, ${token}, ${Number(r.cycle_id)}, ${item})`);
    await psql(`INSERT INTO ${process.env.LEASEPROOF_ROWS_TABLE} (scope, owner, token, cycle_id, item) VALUES ${rows.join(', ')}`);
    return {};
  },
  async release(r) {
    const value = held.get(r.table);
    held.delete(r.table);
    if (value === undefined) return { fail: 'stale' };
    return (await redis('EVAL', RELEASE, 1, 'node:' + r.table, value)) === 1 ? {} : { fail: 'stale' };
  },
  async is_locked(r) {
    return { locked: (await redis('EXISTS', 'node:' + r.table)) === 1 };
  },
};

send({ type: 'hello', protocol: 'leaseproof-client/1', name: 'Node.js Redis lock (compare-and-delete, no keep-alive)' });
const lines = readline.createInterface({ input: process.stdin });
let queue = Promise.resolve();
lines.on('line', (line) => {
  const request = JSON.parse(line);
  queue = queue.then(async () => {
    const handler = handlers[request.type];
    if (!handler) return send({ type: 'fail', in_reply_to: request.msg_id, reason: 'error', text: 'unsupported' });
    try {
      const { fail, ...fields } = await handler(request);
      send(fail ? { type: 'fail', in_reply_to: request.msg_id, reason: fail }
                : { type: 'ok', in_reply_to: request.msg_id, ...fields });
    } catch (error) {
      // Cannot tell whether it took effect.
      send({ type: 'unknown', in_reply_to: request.msg_id, text: String(error.message).slice(0, 200) });
    }
  });
});
lines.on('close', () => process.exit(0));
