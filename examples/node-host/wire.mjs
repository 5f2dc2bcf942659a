// The wire of docs/contract.md ("The wire"), in Node.js 20 with the standard library only:
// strict JSON (exact keys, a key given twice refused, integers as BigInt so that a 64-bit epoch
// keeps every digit), the hidden checksum, base64 and the binary frame.

import { xxh3hex } from './xxh3.mjs';

export const CONTRACT = '1';
export const JSON_TYPE = 'application/json';
export const FRAME_TYPE = 'application/vnd.fakeshard.frame';
const I64_MIN = -(1n << 63n), I64_MAX = (1n << 63n) - 1n;

// A contract error: `code` is the wire's, `status` the HTTP status it is answered with.
const STATUS = {
  malformed_bundle: 400, cache_miss: 409, stale_epoch: 409, cancelled: 409, released: 409,
  position_mismatch: 409, out_of_memory: 507, engine_crashed: 503, bad_request: 400,
  not_found: 404, method_not_allowed: 405, conflict: 409, payload_too_large: 413,
  unsupported_media_type: 415, not_supported: 501,
};
export class ShardError extends Error {
  constructor(code, message, { sessionId = null, epoch = null, expected, got } = {}) {
    super(message);
    Object.assign(this, { code, sessionId, epoch, expected, got, status: STATUS[code] });
  }
  toWire() {
    const body = { kind: 'error', contract: CONTRACT, code: this.code, message: this.message,
      session_id: this.sessionId, epoch: this.epoch };
    if (this.code === 'cache_miss' || this.code === 'position_mismatch') {
      Object.assign(body, { expected: this.expected, got: this.got });
    }
    return body;
  }
}
export const malformed = (message, ids = {}) => new ShardError('malformed_bundle', message, ids);

// -- JSON ---------------------------------------------------------------------------------------

const STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;

class Reader {
  constructor(text) { this.text = text; this.i = 0; }
  fail(what) { throw new SyntaxError(`${what} at character ${this.i}`); }
  space() { while (' \t\n\r'.includes(this.text[this.i]) && this.i < this.text.length) this.i++; }
  value(depth) {
    if (depth > 64) this.fail('nested too deep');
    this.space();
    const c = this.text[this.i];
    if (c === '{') return this.object(depth);
    if (c === '[') return this.array(depth);
    if (c === '"') return this.string();
    if (c === '-' || (c >= '0' && c <= '9')) return this.number();
    for (const [word, value] of [['true', true], ['false', false], ['null', null]]) {
      if (this.text.startsWith(word, this.i)) { this.i += word.length; return value; }
    }
    return this.fail('no JSON value');
  }
  object(depth) {
    const out = Object.create(null);
    this.i++; this.space();
    if (this.text[this.i] === '}') { this.i++; return out; }
    for (;;) {
      this.space();
      if (this.text[this.i] !== '"') this.fail('a key must be a string');
      const key = this.string();
      if (Object.prototype.hasOwnProperty.call(out, key)) this.fail(`key ${JSON.stringify(key)} given twice`);
      this.space();
      if (this.text[this.i++] !== ':') this.fail('":" expected');
      out[key] = this.value(depth + 1);
      this.space();
      const c = this.text[this.i++];
      if (c === '}') return out;
      if (c !== ',') this.fail('"," or "}" expected');
    }
  }
  array(depth) {
    const out = [];
    this.i++; this.space();
    if (this.text[this.i] === ']') { this.i++; return out; }
    for (;;) {
      out.push(this.value(depth + 1));
      this.space();
      const c = this.text[this.i++];
      if (c === ']') return out;
      if (c !== ',') this.fail('"," or "]" expected');
    }
  }
  string() {
    STRING.lastIndex = this.i;
    const m = STRING.exec(this.text);
    if (!m) this.fail('bad string');
    this.i += m[0].length;
    return JSON.parse(m[0]); // a lone surrogate's escape stays a lone surrogate
  }
  number() {
    NUMBER.lastIndex = this.i;
    const m = NUMBER.exec(this.text);
    if (!m) this.fail('bad number');
    this.i += m[0].length;
    // "-0" spells the float -0.0 (a hidden value); no integer field is ever written so.
    return m[1] === undefined && m[2] === undefined && m[0] !== '-0' ? BigInt(m[0]) : Number(m[0]);
  }
}

// Strict JSON: integers as BigInt, a key given twice a SyntaxError, nothing after the value.
export function readJson(text) {
  const reader = new Reader(text);
  const value = reader.value(0);
  reader.space();
  if (reader.i !== text.length) reader.fail('text after the value');
  return value;
}

// JSON text of `value`, with BigInt written as an integer; ASCII only (a lone surrogate as \u).
export function writeJson(value) {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError('JSON has no non-finite numbers');
    if (Object.is(value, -0)) return '-0.0';
    return Number.isInteger(value) && Math.abs(value) < 1e21 ? value.toFixed(1) : String(value);
  }
  if (typeof value === 'string') return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
  if (typeof value === 'boolean') return String(value);
  if (Array.isArray(value)) return '[' + value.map(writeJson).join(',') + ']';
  return '{' + Object.entries(value).filter(([, v]) => v !== undefined)
    .map(([k, v]) => writeJson(k) + ':' + writeJson(v)).join(',') + '}';
}
// Integers the wire writes as integers (a spec's fields, positions, counts): never with ".0".
export const int = (n) => BigInt(n);

// -- UTF-8 with lone surrogates (the checksum header's and a session path's bytes) ---------------

export function wtf8(text) {
  const bytes = [];
  for (let i = 0; i < text.length; i++) {
    let c = text.charCodeAt(i);
    if (c >= 0xD800 && c <= 0xDBFF && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xDC00 && d <= 0xDFFF) { c = 0x10000 + ((c - 0xD800) << 10) + (d - 0xDC00); i++; }
    }
    if (c < 0x80) bytes.push(c);
    else if (c < 0x800) bytes.push(0xC0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) bytes.push(0xE0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else bytes.push(0xF0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return Buffer.from(bytes);
}

// The text `bytes` spell as UTF-8 where a surrogate's three bytes stand for it; null if none.
export function fromWtf8(bytes) {
  let out = '';
  for (let i = 0; i < bytes.length;) {
    const b = bytes[i];
    const n = b < 0x80 ? 1 : b >= 0xC2 && b < 0xE0 ? 2 : b >= 0xE0 && b < 0xF0 ? 3 : b >= 0xF0 && b < 0xF5 ? 4 : 0;
    if (n === 0 || i + n > bytes.length) return null;
    let c = n === 1 ? b : b & (0xFF >> (n + 1));
    for (let k = 1; k < n; k++) {
      if ((bytes[i + k] & 0xC0) !== 0x80) return null;
      c = (c << 6) | (bytes[i + k] & 63);
    }
    if ((n === 3 && c < 0x800) || (n === 4 && (c < 0x10000 || c > 0x10FFFF))) return null;
    out += String.fromCodePoint(c);
    i += n;
  }
  return out;
}

// -- hidden values ---------------------------------------------------------------------------

// The contract's checksum of a hidden bundle's fields; `values` is a Float32Array, row after row.
export function checksum(sessionId, epoch, startPos, layer, rows, cols, values) {
  const header = wtf8(`${CONTRACT}\0${sessionId}\0${epoch}\0${startPos}\0${layer}\0${rows}x${cols}\0`);
  const body = Buffer.from(values.buffer, values.byteOffset, values.byteLength);
  return xxh3hex(Buffer.concat([header, body]));
}

function half(bits) { // binary16 -> number
  const sign = bits & 0x8000 ? -1 : 1, exp = (bits >> 10) & 31, frac = bits & 1023;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

// Float32Array of `rows * cols` values from raw little-endian bytes of `dtype`.
export function valuesOf(dtype, rows, cols, bytes, ids) {
  const size = { float32: 4, float16: 2 }[dtype];
  if (size === undefined) throw malformed(`hidden dtype must be float32 or float16, got ${writeJson(dtype)}`, ids);
  const count = rows * cols;
  if (bytes.length !== count * size) {
    throw malformed(`hidden payload holds ${bytes.length} bytes, shape [${rows}, ${cols}] of ${dtype} needs ${count * size}`, ids);
  }
  const out = new Float32Array(count);
  for (let k = 0; k < count; k++) out[k] = size === 4 ? bytes.readFloatLE(4 * k) : half(bytes.readUInt16LE(2 * k));
  return out;
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
export function fromBase64(text, ids) {
  if (typeof text !== 'string' || !BASE64.test(text)) throw malformed('hidden base64 is not standard padded base64', ids);
  return Buffer.from(text, 'base64');
}

// -- the binary frame -----------------------------------------------------------------------

const MAGIC = Buffer.from('FSB1');
export function readFrame(data) {
  if (data.length < 8 || !data.subarray(0, 4).equals(MAGIC)) throw malformed('frame: no FSB1 magic');
  const size = data.readUInt32LE(4);
  if (size > 1 << 20) throw malformed(`frame: a header of ${size} bytes is over 1 MiB`);
  if (data.length < 8 + size) throw malformed('frame: truncated header');
  const text = new TextDecoder('utf-8', { fatal: true }).decode(data.subarray(8, 8 + size));
  return { header: readJson(text), payload: data.subarray(8 + size) };
}
export function writeFrame(header, payload = Buffer.alloc(0)) {
  const text = Buffer.from(writeJson(header), 'utf-8');
  const length = Buffer.alloc(4);
  length.writeUInt32LE(text.length);
  return Buffer.concat([MAGIC, length, text, payload]);
}

export function inI64(value) { return typeof value === 'bigint' && value >= I64_MIN && value <= I64_MAX; }
