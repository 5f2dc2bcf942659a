#!/usr/bin/env node
// An engine host for fakeshard, in Node.js 20 with the standard library only.
//
//   python3 -m fakeshard check --engine-cmd "node examples/node-host/host.mjs"
//
// Written from docs/contract.md alone ("Engine hosts"): the least a host serves to be judged.
// A control port adds, lists, restarts and removes nodes; each node is one engine on its own
// port, serving HTTP API v1's data plane in JSON and in the binary frame. When ready it prints
// its roster, one JSON line, on standard output; it stops on SIGTERM or SIGINT.
//
// Its engine computes its own toy arithmetic, not the fixture's: the head folds each token
// into a running value it keeps per session (its "KV cache"), every layer maps each value to
// another, and the tail samples a token from its row. So an output at position p depends on
// the tokens 0..p and on nothing else, and any split of the layers gives the same tokens.
// Every session rule of the contract is here, in its order of checks (`Engine`). Fault plans
// are not run: `POST /v1/nodes` with one answers 501, and the kit applies plans in front.
//
// Options: --host ADDRESS (default 127.0.0.1), --port N (the control port; default 0, a free one).

import http from 'node:http';
import { pathToFileURL } from 'node:url';
import {
  CONTRACT, FRAME_TYPE, JSON_TYPE, ShardError, checksum, fromBase64, fromWtf8, inI64, int,
  malformed, readFrame, readJson, valuesOf, writeFrame, writeJson,
} from './wire.mjs';

const MAX_BODY = 257 * 1024 * 1024;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const MOD = 65521; // every value the arithmetic holds is below it, exact in float32

// -- the engine ----------------------------------------------------------------------------

// The call's session id and epoch, as an error carries them: each where it is valid, else null.
function idsOf(obj) {
  const ok = obj !== null && typeof obj === 'object' && !Array.isArray(obj);
  const sid = ok && typeof obj.session_id === 'string' && obj.session_id !== '' ? obj.session_id : null;
  const ep = ok && typeof obj.epoch === 'bigint' && obj.epoch >= 0n && inI64(obj.epoch) ? obj.epoch : null;
  return { sessionId: sid, epoch: ep };
}

const KEYS = {
  token_bundle: ['kind', 'contract', 'session_id', 'epoch', 'start_pos', 'tokens'],
  hidden_bundle: ['kind', 'contract', 'session_id', 'epoch', 'start_pos', 'layer', 'hidden', 'checksum'],
};

function index(value, name, low, ids) {
  if (typeof value !== 'bigint' || value < low || !inI64(value)) {
    throw malformed(`${name} must be an int >= ${low}, got ${writeJson(value ?? null)}`, ids);
  }
  return value;
}

export class Engine {
  constructor(spec, seed, capacity) {
    this.spec = spec; // numbers: model_id, n_layers, start_layer, end_layer, hidden_size, vocab_size
    this.capacity = capacity; // null: no bound
    this.head = spec.start_layer === 0;
    this.tail = spec.end_layer === spec.n_layers;
    let salt = Number(BigInt.asUintN(32, BigInt(seed)) % BigInt(MOD));
    for (const byte of Buffer.from(spec.model_id, 'utf-8')) salt = (salt * 257 + byte) % MOD;
    this.salt = salt;
    this.restart();
  }

  restart() { this.sessions = new Map(); this.used = 0; this.crashed = false; }
  crash() { this.restart(); this.crashed = true; }

  // The bundle a compute call carries, read and checked against this engine's spec.
  read(op, obj, payload) {
    const ids = idsOf(obj);
    if (obj === null || typeof obj !== 'object' || Array.isArray(obj) || !(obj.kind in KEYS)) {
      throw malformed(`${op}: the body is no token_bundle or hidden_bundle`, ids);
    }
    const want = this.head ? 'token_bundle' : 'hidden_bundle';
    if (obj.kind !== want) throw malformed(`${op}: this node takes a ${want}, got a ${obj.kind}`, ids);
    const keys = Object.keys(obj).sort().join();
    if (keys !== [...KEYS[want]].sort().join()) throw malformed(`${op}: a ${want} has exactly the keys ${KEYS[want]}`, ids);
    if (obj.contract !== CONTRACT) throw malformed(`contract must be "1", got ${writeJson(obj.contract)}`, ids);
    if (ids.sessionId === null) throw malformed(`session_id must be a non-empty str, got ${writeJson(obj.session_id)}`, ids);
    index(obj.epoch, 'epoch', 0n, ids);
    const bundle = { sessionId: obj.session_id, epoch: obj.epoch, start: index(obj.start_pos, 'start_pos', 0n, ids) };
    if (this.head) {
      if (payload !== null && payload.length) throw malformed('frame: a token bundle has no payload', ids);
      if (!Array.isArray(obj.tokens) || obj.tokens.length === 0) throw malformed('tokens must be a non-empty list of ints', ids);
      for (const [i, token] of obj.tokens.entries()) {
        index(token, `tokens[${i}]`, 0n, ids);
        if (token >= BigInt(this.spec.vocab_size)) throw malformed(`tokens[${i}] = ${token} is outside the vocabulary`, ids);
      }
      bundle.inputs = obj.tokens.map(Number);
    } else {
      const layer = index(obj.layer, 'layer', 1n, ids);
      if (layer !== BigInt(this.spec.start_layer)) throw malformed(`layer ${layer}: this node starts at layer ${this.spec.start_layer}`, ids);
      const { rows, cols, values, exact } = this.hidden(obj.hidden, payload, ids);
      if (cols !== this.spec.hidden_size) throw malformed(`hidden rows hold ${cols} values, hidden_size is ${this.spec.hidden_size}`, ids);
      if (!this.sealed(obj, bundle.start, layer, rows, cols, values)) throw malformed('checksum does not match the contents', ids);
      bundle.inputs = Array.from({ length: rows }, (_, r) => Array.from(exact.subarray(r * cols, (r + 1) * cols)));
    }
    if (op === 'decode' && bundle.inputs.length !== 1) throw malformed(`decode takes one position, got ${bundle.inputs.length}`, ids);
    return bundle;
  }

  // Hidden values in any of the wire's forms: their shape, as float32 (for the checksum) and as sent.
  hidden(hidden, payload, ids) {
    if (Array.isArray(hidden)) {
      if (payload !== null) throw malformed('frame: hidden must be {dtype, shape}', ids);
      const rows = hidden.length, cols = Array.isArray(hidden[0]) ? hidden[0].length : 0;
      if (rows === 0 || cols === 0) throw malformed('hidden must be a non-empty list of non-empty rows', ids);
      const exact = new Float64Array(rows * cols);
      hidden.forEach((row, r) => {
        if (!Array.isArray(row) || row.length !== cols) throw malformed(`hidden[${r}] is no row of ${cols} values`, ids);
        row.forEach((value, c) => {
          const number = typeof value === 'bigint' ? Number(value) : value;
          if (typeof number !== 'number' || !Number.isFinite(number)) throw malformed(`hidden[${r}][${c}] is no finite number`, ids);
          exact[r * cols + c] = number;
        });
      });
      return { rows, cols, values: Float32Array.from(exact), exact };
    }
    const form = payload === null ? ['base64', 'dtype', 'shape'] : ['dtype', 'shape'];
    if (hidden === null || typeof hidden !== 'object' || Object.keys(hidden).sort().join() !== form.join()) {
      throw malformed(`hidden must be rows or an object of ${form}`, ids);
    }
    const shape = hidden.shape;
    if (!Array.isArray(shape) || shape.length !== 2 || !shape.every((n) => typeof n === 'bigint' && n >= 0n && n < 2n ** 31n)) {
      throw malformed('hidden shape must be [rows, cols], each 0 to 2**31 - 1', ids);
    }
    const [rows, cols] = shape.map(Number);
    const bytes = payload === null ? fromBase64(hidden.base64, ids) : payload;
    const values = valuesOf(hidden.dtype, rows, cols, bytes, ids);
    if (rows === 0 || cols === 0) throw malformed('hidden must be a non-empty list of non-empty rows', ids);
    if (!values.every(Number.isFinite)) throw malformed('hidden holds a value that is not finite', ids);
    return { rows, cols, values, exact: Float64Array.from(values) };
  }

  // Whether a hidden bundle's checksum is the contract's over its fields and values.
  sealed(obj, start, layer, rows, cols, values) {
    return obj.checksum === checksum(obj.session_id, obj.epoch, start, layer, rows, cols, values);
  }

  compute(op, obj, payload) {
    if (this.crashed) throw new ShardError('engine_crashed', `${op}: the node is down`, idsOf(obj));
    const { sessionId, epoch, start, inputs } = this.read(op, obj, payload);
    const ids = { sessionId, epoch };
    const entry = this.sessions.get(sessionId);
    const n = inputs.length;
    let freed = 0, state = this.salt;
    if (entry !== undefined && epoch <= entry.epoch) {
      if (this.stale(entry, epoch)) throw new ShardError('stale_epoch', `${op}: the session is at epoch ${entry.epoch}`, ids);
      if (entry.status === 'cancelled') throw new ShardError('cancelled', `${op}: the session was cancelled`, ids);
      if (entry.status === 'released') throw new ShardError('released', `${op}: the session was released`, ids);
      if (start !== BigInt(entry.cached)) {
        throw new ShardError('position_mismatch', `${op}: starts at ${start}, ${entry.cached} positions are cached`,
          { ...ids, expected: int(entry.cached), got: start });
      }
      state = entry.state;
    } else if (op !== 'prefill' || start !== 0n) {
      throw this.cacheMiss(op, ids, start);
    } else if (entry !== undefined) {
      freed = entry.cached; // an older epoch's cache, replaced
    }
    this.checkRoom(op, ids, n, freed);
    const { rows, last } = this.forward(state, inputs);
    // Commit: nothing above changed any state.
    if (entry === undefined || entry.epoch !== epoch) {
      this.sessions.set(sessionId, { epoch, status: 'live', cached: n, state: last });
    } else {
      entry.cached = this.positions(entry.cached + n);
      entry.state = last;
    }
    this.used += n - freed;
    return this.output(sessionId, epoch, start, rows);
  }

  stale(entry, epoch) { return epoch < entry.epoch; }

  // A session's count of cached positions after an append (a count of any size).
  positions(count) { return count; }

  cacheMiss(op, ids, start) {
    return new ShardError('cache_miss', `${op}: nothing cached at this epoch; replay from position 0`,
      { ...ids, expected: 0n, got: start });
  }

  checkRoom(op, ids, n, freed) {
    if (this.capacity !== null && n > this.capacity - (this.used - freed)) {
      throw new ShardError('out_of_memory', `${op}: ${n} positions do not fit in ${this.capacity}`, ids);
    }
  }

  // The layers' arithmetic: rows of output values (float32-exact) and the head's running value.
  forward(state, inputs) {
    const { hidden_size: width, start_layer: first, end_layer: end } = this.spec;
    const rows = inputs.map((input) => {
      let row = input;
      if (this.head) {
        state = (state * 131 + input + 1) % MOD;
        row = Array.from({ length: width }, (_, j) => (state * (j + 1) + 7 * j) % MOD);
      }
      for (let layer = first; layer < end; layer++) {
        row = row.map((v, j) => Math.fround(((v % MOD) * 3 + 17 * layer + j + 5) % MOD));
      }
      return row;
    });
    return { rows, last: state };
  }

  output(sessionId, epoch, start, rows) {
    if (this.tail) {
      let acc = 0;
      for (const v of rows[rows.length - 1]) acc = (acc * 31 + Math.floor(Math.abs(v))) % 1000003;
      return { kind: 'sample_bundle', contract: CONTRACT, session_id: sessionId, epoch,
        pos: start + int(rows.length), token: int(acc % this.spec.vocab_size) };
    }
    return { kind: 'hidden_bundle', contract: CONTRACT, session_id: sessionId, epoch, start_pos: start,
      layer: int(this.spec.end_layer), values: Float32Array.from(rows.flat()), rows: rows.length };
  }

  close(op, obj) {
    const ids = idsOf(obj);
    if (this.crashed) throw new ShardError('engine_crashed', `${op}: the node is down`, ids);
    if (ids.sessionId === null) throw malformed(`${op}: session_id must be a non-empty str`, ids);
    if (ids.epoch === null) throw malformed(`${op}: epoch must be an int >= 0`, ids);
    const status = op === 'cancel' ? 'cancelled' : 'released';
    const { sessionId, epoch } = ids;
    const entry = this.sessions.get(sessionId);
    if (entry === undefined) {
      this.sessions.set(sessionId, { epoch, status, cached: 0, state: null }); // a tombstone
    } else if (this.stale(entry, epoch)) {
      throw new ShardError('stale_epoch', `${op}: the session is at epoch ${entry.epoch}`, ids);
    } else if (epoch > entry.epoch || entry.status === 'live') {
      this.used -= entry.cached;
      Object.assign(entry, { epoch, status, cached: 0, state: null });
    } // else: already cancelled or released at this epoch, a no-op
  }

  view(sessionId) {
    const entry = this.sessions.get(sessionId);
    return entry && { kind: 'session_view', contract: CONTRACT, session_id: sessionId, epoch: entry.epoch,
      status: entry.status, cached_tokens: int(entry.cached) };
  }
}

// -- HTTP ----------------------------------------------------------------------------------

function send(res, status, body, type, headers = {}) {
  res.writeHead(status, { 'Content-Type': type, 'Content-Length': body.length, ...headers });
  res.end(body);
}
const sendJson = (res, status, data, headers) => send(res, status, Buffer.from(writeJson(data)), JSON_TYPE, headers);
const sendError = (res, err, headers) => sendJson(res, err.status, err.toWire(), headers);
const ok = { kind: 'ok', contract: CONTRACT };
const DELAY = { 'Fakeshard-Delay': '0.0' };

// Reads a request's body (to its end, even over the limit: the 413 leaves the connection usable).
function body(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => { size += chunk.length; if (size <= MAX_BODY) chunks.push(chunk); });
    req.on('end', () => resolve(size > MAX_BODY ? null : Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

// The request's path as sent (not a URL's: no dot segment is removed, as a session id may be
// "..") and its query.
function targetOf(req) {
  const at = req.url.indexOf('?');
  const pathname = at < 0 ? req.url : req.url.slice(0, at);
  return { pathname, searchParams: new URLSearchParams(at < 0 ? '' : req.url.slice(at + 1)) };
}

function routeOf(req, routes) {
  const url = targetOf(req);
  const method = req.method === 'HEAD' ? 'GET' : req.method;
  for (const [pattern, handlers] of routes) {
    const match = pattern.exec(url.pathname);
    if (match === null) continue;
    if (handlers[method] === undefined) {
      const allow = Object.keys(handlers).flatMap((m) => (m === 'GET' ? ['GET', 'HEAD'] : [m])).join(', ');
      throw Object.assign(new ShardError('method_not_allowed', `${req.method} is not allowed on ${url.pathname}`),
        { headers: { Allow: allow } });
    }
    return { handler: handlers[method], match, url };
  }
  throw new ShardError('not_found', `no route ${req.method} ${url.pathname}`);
}

// The server of `routes` ([regex over the path, {METHOD: handler(req, res, match, url, body)}]).
function server(routes) {
  const srv = http.createServer(async (req, res) => {
    res.sendDate = false; // a node reads no wall clock
    try {
      const { handler, match, url } = routeOf(req, routes);
      const data = await body(req);
      if (data === null) throw new ShardError('payload_too_large', `the body is over ${MAX_BODY} bytes`);
      await handler(req, res, match, url, data);
    } catch (err) {
      req.resume();
      if (err instanceof ShardError) return sendError(res, err, err.headers);
      // A bug of this host: said on standard error, answered as a request it could not serve.
      process.stderr.write(`${err.stack}\n`);
      return sendError(res, new ShardError('bad_request', `the host failed: ${err.message}`));
    }
  });
  srv.keepAliveTimeout = 0; // a client's pooled connection stays usable until it closes it
  srv.requestTimeout = 0;
  srv.headersTimeout = 0;
  return srv;
}

const mediaOf = (req) => (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();

class Node {
  constructor(name, engine, hostAddress) {
    this.name = name;
    this.engine = engine;
    this.address = hostAddress;
    const compute = (op) => (req, res, match, url, data) => this.compute(op, req, res, url, data);
    const close = (op) => (req, res, match, url, data) => this.close(op, req, res, data);
    this.server = server([
      [/^\/v1\/prefill$/, { POST: compute('prefill') }],
      [/^\/v1\/decode$/, { POST: compute('decode') }],
      [/^\/v1\/cancel$/, { POST: close('cancel') }],
      [/^\/v1\/release$/, { POST: close('release') }],
      [/^\/v1\/sessions\/(.+)$/s, { GET: (req, res, m) => this.session(res, m[1]) }],
      [/^\/v1\/state$/, { GET: (req, res) => sendJson(res, 200, this.state()) }],
    ]);
  }

  async listen(port = 0) {
    await new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, this.address, resolve);
    });
    this.port = this.server.address().port;
  }

  stop() { this.server.close(); this.server.closeAllConnections(); }

  get url() { return `http://${this.address.includes(':') ? `[${this.address}]` : this.address}:${this.port}`; }

  describe() {
    return { name: this.name, url: this.url, spec: specJson(this.engine.spec), evidence_class: 'fixture', partition: null };
  }

  state() {
    const e = this.engine;
    return { kind: 'node_state', contract: CONTRACT, name: this.name, spec: specJson(e.spec), evidence_class: 'fixture',
      crashed: e.crashed, used_tokens: int(e.used), capacity_tokens: e.capacity === null ? null : int(e.capacity) };
  }

  compute(op, req, res, url, data) {
    const media = mediaOf(req);
    if (media !== JSON_TYPE && media !== FRAME_TYPE) {
      throw new ShardError('unsupported_media_type', `Content-Type must be ${JSON_TYPE} or ${FRAME_TYPE}`);
    }
    const forms = url.searchParams.getAll('hidden');
    if (forms.length > 1 || (forms.length === 1 && !['base64', 'floats'].includes(forms[0]))) {
      throw new ShardError('bad_request', 'the query\'s hidden must be base64 or floats, given once');
    }
    let obj = null, payload = media === FRAME_TYPE ? Buffer.alloc(0) : null;
    try {
      if (media === FRAME_TYPE) ({ header: obj, payload } = readFrame(data));
      else obj = readJson(new TextDecoder('utf-8', { fatal: true }).decode(data));
    } catch (err) {
      if (err instanceof ShardError) obj = { unreadable: err.message };
      else obj = { unreadable: `the body is no bundle: ${err.message}` }; // the engine refuses it
    }
    let out;
    try {
      out = this.engine.compute(op, obj, payload);
    } catch (err) {
      if (err instanceof ShardError) return sendError(res, err, DELAY);
      throw err;
    }
    if (out.kind === 'sample_bundle') {
      return media === FRAME_TYPE ? send(res, 200, writeFrame(out), FRAME_TYPE, DELAY) : sendJson(res, 200, out, DELAY);
    }
    const { values, rows, ...fields } = out;
    const cols = values.length / rows;
    const sealed = { ...fields, checksum: checksum(out.session_id, out.epoch, out.start_pos, out.layer, rows, cols, values) };
    const bytes = Buffer.from(values.buffer, values.byteOffset, values.byteLength);
    if (media === FRAME_TYPE) {
      const header = { ...fields, hidden: { dtype: 'float32', shape: [int(rows), int(cols)] }, checksum: sealed.checksum };
      return send(res, 200, writeFrame(header, bytes), FRAME_TYPE, DELAY);
    }
    const hidden = forms[0] === 'floats'
      ? Array.from({ length: rows }, (_, r) => Array.from(values.subarray(r * cols, (r + 1) * cols)))
      : { dtype: 'float32', shape: [int(rows), int(cols)], base64: bytes.toString('base64') };
    const { checksum: sum, ...rest } = sealed;
    return sendJson(res, 200, { ...rest, hidden, checksum: sum }, DELAY);
  }

  close(op, req, res, data) {
    if (mediaOf(req) !== JSON_TYPE) throw new ShardError('unsupported_media_type', `Content-Type must be ${JSON_TYPE}`);
    let obj = null;
    try {
      const read = readJson(new TextDecoder('utf-8', { fatal: true }).decode(data));
      if (read !== null && typeof read === 'object' && Object.keys(read).sort().join() === 'epoch,session_id') obj = read;
    } catch { /* not JSON: the engine refuses what is no session id and epoch */ }
    try {
      this.engine.close(op, obj);
    } catch (err) {
      if (err instanceof ShardError) return sendError(res, err, DELAY);
      throw err;
    }
    return sendJson(res, 200, ok, DELAY);
  }

  session(res, escaped) {
    const bytes = [];
    for (let i = 0; i < escaped.length; i++) {
      if (escaped[i] === '%' && /^[0-9a-fA-F]{2}$/.test(escaped.slice(i + 1, i + 3))) {
        bytes.push(parseInt(escaped.slice(i + 1, i + 3), 16));
        i += 2;
      } else bytes.push(escaped.charCodeAt(i) & 0xFF);
    }
    const sessionId = fromWtf8(Buffer.from(bytes));
    const view = sessionId === null ? undefined : this.engine.view(sessionId);
    if (view === undefined) throw new ShardError('not_found', 'no such session on this node');
    sendJson(res, 200, view);
  }
}

function specJson(spec) {
  const { model_id: modelId, ...numbers } = spec;
  return { model_id: modelId, ...Object.fromEntries(Object.entries(numbers).map(([k, v]) => [k, int(v)])) };
}

// A node's spec from POST /v1/nodes, or a bad_request naming what is wrong.
function readSpec(spec) {
  const bad = (what) => new ShardError('bad_request', `spec: ${what}`);
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) throw bad('must be an object');
  const fields = { model_id: null, n_layers: 1, start_layer: 0, end_layer: 1, hidden_size: 4, vocab_size: 2 };
  for (const key of Object.keys(spec)) if (!(key in fields)) throw bad(`unknown field ${writeJson(key)}`);
  if (typeof spec.model_id !== 'string' || spec.model_id === '') throw bad('model_id must be a non-empty str');
  const out = { model_id: spec.model_id, hidden_size: 8, vocab_size: 256 };
  for (const [key, low] of Object.entries(fields)) {
    if (key === 'model_id' || (spec[key] === undefined && key in out)) continue;
    const value = spec[key];
    if (typeof value !== 'bigint' || value < BigInt(low) || value >= 2n ** 31n) throw bad(`${key} must be an int from ${low} to 2**31 - 1`);
    out[key] = Number(value);
  }
  if (!(out.start_layer < out.end_layer && out.end_layer <= out.n_layers)) throw bad('needs 0 <= start_layer < end_layer <= n_layers');
  return out;
}

// -- the control port -----------------------------------------------------------------------

export async function serve({ EngineClass = Engine, argv = process.argv.slice(2) } = {}) {
  const option = (name, fallback) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : fallback; };
  const address = option('--host', '127.0.0.1');
  const nodes = new Map();
  let control = null, added = 0;
  const roster = () => ({ kind: 'roster', contract: CONTRACT, control: control.url, engine: 'examples/node-host (Node.js)',
    nodes: Object.fromEntries([...nodes].map(([name, node]) => [name, node.describe()])) });
  const nodeOf = (name) => {
    const node = nodes.get(decodeURIComponent(name));
    if (node === undefined) throw new ShardError('not_found', `no node ${writeJson(name)}`);
    return node;
  };
  const readBody = (data) => {
    try { return readJson(data.toString('utf-8')); } catch (err) { throw new ShardError('bad_request', `the body is no JSON: ${err.message}`); }
  };
  const unsupported = () => { throw new ShardError('not_supported', 'this host runs no fault plans, partitions or call log'); };

  async function add(req, res, m, url, data) {
    const request = readBody(data);
    if (request === null || typeof request !== 'object' || Array.isArray(request)) throw new ShardError('bad_request', 'the body must be an object');
    const known = ['spec', 'name', 'seed', 'capacity_tokens', 'faults', 'port', 'latency'];
    for (const key of Object.keys(request)) if (!known.includes(key)) throw new ShardError('bad_request', `unknown field ${writeJson(key)}`);
    const spec = readSpec(request.spec);
    const seed = request.seed ?? 0n;
    if (typeof seed !== 'bigint' || !inI64(seed)) throw new ShardError('bad_request', 'seed must be an int');
    const capacity = request.capacity_tokens ?? null;
    if (capacity !== null && (typeof capacity !== 'bigint' || capacity < 0n || !inI64(capacity))) {
      throw new ShardError('bad_request', 'capacity_tokens must be an int >= 0 or null');
    }
    const port = request.port ?? 0n;
    if (typeof port !== 'bigint' || port < 0n || port > 65535n) throw new ShardError('bad_request', 'port must be 0 to 65535');
    if ((request.faults ?? null) !== null || (request.latency ?? null) !== null) unsupported();
    let name = request.name;
    if (name === undefined) { do name = `node-${added++}`; while (nodes.has(name)); }
    if (typeof name !== 'string' || !NAME.test(name)) throw new ShardError('bad_request', `name must match ${NAME}`);
    if (nodes.has(name)) throw new ShardError('conflict', `a node named ${name} exists`);
    const engine = new EngineClass(spec, seed, capacity === null ? null : Number(capacity));
    const node = new Node(name, engine, address);
    nodes.set(name, node);
    try {
      await node.listen(Number(port));
    } catch (err) {
      nodes.delete(name);
      throw new ShardError('conflict', `port ${port}: ${err.code ?? err.message}`);
    }
    sendJson(res, 200, node.describe());
  }
  function admin(action) {
    return (req, res, m) => {
      const node = nodeOf(m[1]);
      if (action === 'remove') { node.stop(); nodes.delete(node.name); } else node.engine[action]();
      sendJson(res, 200, ok);
    };
  }
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    for (const node of nodes.values()) node.stop();
    control.server.close();
    control.server.closeAllConnections();
    process.exit(0);
  };
  control = new Node('control', null, address);
  control.server = server([
    [/^\/v1\/nodes$/, { GET: (req, res) => sendJson(res, 200, roster()), POST: add }],
    [/^\/v1\/nodes\/([^/]+)$/, { DELETE: admin('remove') }],
    [/^\/v1\/nodes\/([^/]+)\/restart$/, { POST: admin('restart') }],
    [/^\/v1\/nodes\/([^/]+)\/crash$/, { POST: admin('crash') }],
    [/^\/v1\/nodes\/([^/]+)\/faults$/, { PUT: unsupported }],
    [/^\/v1\/nodes\/([^/]+)\/partition$/, { POST: unsupported, DELETE: unsupported }],
    [/^\/v1\/(?:nodes\/([^/]+)\/)?(?:log|calls)$/, { GET: unsupported }],
    [/^\/v1\/shutdown$/, { POST: (req, res) => { sendJson(res, 200, ok); setImmediate(stop); } }],
  ]);
  await control.listen(Number(option('--port', '0')));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdout.write(writeJson(roster()) + '\n');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) serve();
