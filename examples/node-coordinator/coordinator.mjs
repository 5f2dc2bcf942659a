#!/usr/bin/env node
// A coordinator program for fakeshard, in Node.js 20 with the standard library only.
//
//   python3 -m fakeshard check --coordinator-cmd "node examples/node-coordinator/coordinator.mjs"
//
// It speaks the stdio protocol of docs/contract.md ("Coordinator programs"): one JSON
// request a line on standard input, one JSON answer a line on standard output, answers
// in any order; its log goes to standard error.  It reaches the nodes through HTTP API v1
// only (readable JSON bodies, Node's own fetch), and a node's restart through the control
// API that init names.
//
// The design is the kit's reference coordinator's:
// * one request at a time per session (a lock per session id), so nothing is sent for a
//   session after its release returns;
// * a session is routed, stage by stage, to the replica with the fewest open sessions
//   that has not failed lately;
// * every node call has a timeout (a partition that hangs costs a timeout, not a hang);
//   within one request, each attempt after a timed-out one waits twice as long, up to
//   MAX_STRETCH times the timeout, so a node slower than the timeout (a long prefill, a
//   loaded machine) is waited out instead of asked again for ever;
// * on any failure: avoid the node for a while, restart it if it says it is down, bump the
//   session's epoch and replay its whole history from position 0 on the new route;
// * release releases the session on every node it ever touched, and retries in the
//   background where that failed, until it lands or the node leaves;
// * nodes_changed replaces the cluster; a route through a node that left is re-routed.

import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';

const CALL_TIMEOUT_MS = Number(process.env.FAKESHARD_CALL_TIMEOUT_MS ?? 1000);
const MAX_STRETCH = 8;
const SUSPECT_MS = 5000;
const MAX_ATTEMPTS = 24;
const SWEEP_MS = 1000;

// A failed node call: `code` is a contract error code, or one of
//   engine_crashed (no connection: nothing was applied), response_lost (the connection broke
//   after the request was sent), timeout, malformed_output (an answer that breaks the contract).
export class CallFailed extends Error {
  constructor(node, code, message) {
    super(`${node.name}: ${code}: ${message}`);
    this.node = node;
    this.code = code;
  }
}

export class GaveUp extends Error {}

export class Coordinator {
  constructor(log = (line) => process.stderr.write(line + '\n')) {
    this.log = log;
    this.control = '';
    this.stages = [];          // per stage, the nodes present: {name, url, start_layer, end_layer, spec}
    this.nodes = new Map();    // name -> node, every node ever seen
    this.sessions = new Map(); // id -> {id, prompt, generated, epoch, route, needsReplay, open, touched}
    this.epochs = new Map();   // id -> highest epoch ever used (a reused id goes above its old fences)
    this.locks = new Map();
    this.suspect = new Map();  // node name -> until when (ms) it is avoided
    this.unreleased = [];      // [node, id, epoch] releases still to land
    this.sweeping = false;
  }

  // -- the protocol ----------------------------------------------------------------------

  async init({ control, stages }) {
    this.control = control;
    this.stages = await this.learn(stages);
  }

  async nodesChanged({ stages }) {
    this.stages = await this.learn(stages);
    for (const s of this.sessions.values()) {
      if (s.open) s.route = s.route.map((node) => (node && this.present(node) ? node : null));
    }
  }

  async start({ session_id: id, prompt }) {
    await this.locked(id, async () => {
      const epoch = (this.epochs.get(id) ?? -1) + 1;
      this.epochs.set(id, epoch);
      this.sessions.set(id, { id, prompt: [...prompt], generated: [], epoch, route: [], needsReplay: true,
                              open: true, touched: new Map() });
    });
  }

  // How long to wait before attempt `attempt` (1, 2, ...) of a next_token: doubling from 50 ms,
  // at most a second.
  backoffMs(attempt) {
    return Math.min(1000, 50 * 2 ** (attempt - 1));
  }

  async nextToken({ session_id: id }) {
    return this.locked(id, async () => {
      const s = this.sessions.get(id);
      let stretch = 1; // doubles after each attempt that timed out
      for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        if (attempt) await sleep(this.backoffMs(attempt));
        const route = this.route(s);
        if (route === null) continue; // a stage with no node: wait and look again
        try {
          const token = await this.through(s, route, CALL_TIMEOUT_MS * stretch);
          s.needsReplay = false;
          s.generated.push(token);
          return token;
        } catch (err) {
          if (!(err instanceof CallFailed)) throw err;
          this.log(`session ${id}: ${err.message}`);
          if (err.code === 'timeout') stretch = Math.min(2 * stretch, MAX_STRETCH);
          await this.recover(s, err);
        }
      }
      throw new GaveUp(`session ${id}: no token after ${MAX_ATTEMPTS} attempts`);
    });
  }

  async release({ session_id: id }) {
    await this.locked(id, async () => {
      const s = this.sessions.get(id);
      s.open = false;
      const nodes = [...s.touched.values()].filter((node) => this.present(node));
      await Promise.all(nodes.map(async (node) => {
        try {
          await this.close(node, 'release', id, s.epoch);
        } catch (err) {
          if (!(err instanceof CallFailed)) throw err;
          if (!['stale_epoch', 'released', 'cancelled'].includes(err.code)) this.unreleased.push([node, id, s.epoch]);
        }
      }));
      this.sweep();
    });
  }

  // -- routing and recovery ----------------------------------------------------------------

  route(s) {
    if (s.route.length !== this.stages.length) s.route = this.stages.map(() => null);
    for (let i = 0; i < this.stages.length; i++) {
      if (s.route[i]) continue;
      const stage = this.stages[i];
      if (!stage.length) return null;
      const now = Date.now();
      const score = (node, k) => {
        let load = 0;
        for (const other of this.sessions.values()) if (other.open && other.route[i] === node) load++;
        return [(this.suspect.get(node.name) ?? 0) > now ? 1 : 0, load, k];
      };
      const ranked = stage.map((node, k) => [score(node, k), node])
        .sort((a, b) => a[0][0] - b[0][0] || a[0][1] - b[0][1] || a[0][2] - b[0][2]);
      s.route[i] = ranked[0][1];
      if (!s.needsReplay) { // a new node holds nothing of the session: replay there
        this.bump(s);
      }
    }
    return [...s.route];
  }

  bump(s) {
    s.epoch += 1;
    this.epochs.set(s.id, s.epoch);
    s.needsReplay = true;
  }

  async through(s, route, timeoutMs) {
    const history = [...s.prompt, ...s.generated];
    const replay = s.needsReplay;
    const request = { kind: 'token_bundle', contract: '1', session_id: s.id, epoch: s.epoch,
                      start_pos: replay ? 0 : history.length - 1, tokens: replay ? history : history.slice(-1) };
    let bundle = request;
    for (let i = 0; i < route.length; i++) {
      const node = route[i];
      if (!this.present(node)) throw new CallFailed(node, 'engine_crashed', 'left the cluster');
      s.touched.set(node.name, node);
      const out = await this.call(node, replay ? 'prefill' : 'decode', bundle, timeoutMs);
      const problem = this.problem(node, request, out, i === route.length - 1);
      if (problem) throw new CallFailed(node, 'malformed_output', problem);
      bundle = out;
    }
    return bundle.token;
  }

  // What is wrong with a stage's answer (what can be judged without the checksum: a bad
  // checksum or shape is refused by the next stage, which names it).
  problem(node, request, out, last) {
    const n = request.tokens.length;
    if (out.session_id !== request.session_id) return `session ${out.session_id} for ${request.session_id}`;
    if (out.epoch !== request.epoch) return `epoch ${out.epoch} for ${request.epoch}`;
    if (last) {
      if (out.kind !== 'sample_bundle') return `a ${out.kind}, expected a sample_bundle`;
      if (out.pos !== request.start_pos + n) return `pos ${out.pos}, expected ${request.start_pos + n}`;
      if (!Number.isInteger(out.token) || out.token < 0 || out.token >= node.spec.vocab_size) {
        return `token ${out.token} outside the vocabulary`;
      }
      return null;
    }
    if (out.kind !== 'hidden_bundle') return `a ${out.kind}, expected a hidden_bundle`;
    if (out.start_pos !== request.start_pos) return `start_pos ${out.start_pos} for ${request.start_pos}`;
    if (out.layer !== node.end_layer) return `layer ${out.layer}, expected ${node.end_layer}`;
    // hidden is rows of numbers, or {dtype, shape: [rows, cols], base64} (the nodes' default)
    const rows = Array.isArray(out.hidden) ? out.hidden.length : out.hidden?.shape?.[0];
    if (rows !== n) return `${rows} hidden rows for ${n} positions`;
    return null;
  }

  async recover(s, err) {
    const node = err.node;
    if (['engine_crashed', 'timeout', 'response_lost'].includes(err.code)) {
      this.suspect.set(node.name, Date.now() + SUSPECT_MS);
      if (err.code === 'engine_crashed' && this.present(node)) {
        try {
          await this.post(`${this.control}/v1/nodes/${encodeURIComponent(node.name)}/restart`, {}, node);
        } catch (e) {
          if (!(e instanceof CallFailed)) throw e; // unreachable: the suspicion keeps routes away
        }
      }
      const i = s.route.indexOf(node);
      if (i >= 0) s.route[i] = null;
    }
    this.bump(s);
  }

  sweep() {
    if (this.sweeping || !this.unreleased.length) return;
    this.sweeping = true;
    (async () => {
      while (this.unreleased.length) {
        await sleep(SWEEP_MS);
        const pending = this.unreleased;
        this.unreleased = [];
        for (const [node, id, epoch] of pending) {
          if (!this.present(node)) continue;
          try {
            await this.close(node, 'release', id, epoch);
          } catch (err) {
            if (!(err instanceof CallFailed)) throw err;
            if (!['stale_epoch', 'released', 'cancelled'].includes(err.code)) this.unreleased.push([node, id, epoch]);
          }
        }
      }
      this.sweeping = false;
    })().catch((err) => this.log(`sweep: ${err.stack}`));
  }

  // -- the nodes ---------------------------------------------------------------------------

  present(node) {
    return this.stages.some((stage) => stage.includes(node));
  }

  async learn(stages) {
    const out = [];
    for (const stage of stages) {
      const nodes = [];
      for (const address of stage) {
        let node = this.nodes.get(address.name);
        if (!node) {
          const state = await (await fetch(`${address.url}/v1/state`)).json();
          node = { ...address, spec: state.spec };
          this.nodes.set(node.name, node);
        }
        nodes.push(node);
      }
      out.push(nodes);
    }
    return out;
  }

  async call(node, op, bundle, timeoutMs) {
    return this.post(`${node.url}/v1/${op}`, bundle, node, timeoutMs);
  }

  async close(node, op, id, epoch) {
    return this.post(`${node.url}/v1/${op}`, { session_id: id, epoch }, node);
  }

  // POST a JSON body; the answer's JSON, or a CallFailed naming what went wrong.
  async post(url, body, node, timeoutMs = CALL_TIMEOUT_MS) {
    let response;
    try {
      response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' },
                                    body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs) });
    } catch (err) {
      throw this.transportFailure(node, err);
    }
    let text;
    try {
      text = await response.text();
    } catch (err) {
      throw this.transportFailure(node, err, true);
    }
    let data;
    try {
      data = JSON.parse(text);
    } catch {
      throw new CallFailed(node, 'response_lost', `an answer that is not JSON (HTTP ${response.status})`);
    }
    if (response.status !== 200) {
      // An engine's error carries its code; anything else from a node means it cannot serve.
      throw new CallFailed(node, data.code && data.kind === 'error' && response.status !== 404 && response.status !== 501
        ? data.code : 'engine_crashed', data.message ?? `HTTP ${response.status}`);
    }
    return data;
  }

  transportFailure(node, err, sent = false) {
    if (err.name === 'TimeoutError' || err.name === 'AbortError') return new CallFailed(node, 'timeout', 'no answer in time');
    const code = err.cause?.code;
    if (!sent && (code === 'ECONNREFUSED' || code === 'ENOTFOUND')) {
      return new CallFailed(node, 'engine_crashed', `no connection (${code}): nothing was applied`);
    }
    return new CallFailed(node, 'response_lost', `${code ?? err.message} after the request was sent`);
  }

  locked(id, fn) {
    const before = this.locks.get(id) ?? Promise.resolve();
    const run = before.then(fn, fn);
    this.locks.set(id, run.catch(() => {}));
    return run;
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Answer the protocol's requests on standard input with `coordinator` until it closes.
export function main(coordinator = new Coordinator()) {
  const handlers = {
    init: async (m) => { await coordinator.init(m); return {}; },
    start: async (m) => { await coordinator.start(m); return {}; },
    next_token: async (m) => ({ token: await coordinator.nextToken(m) }),
    release: async (m) => { await coordinator.release(m); return {}; },
    nodes_changed: async (m) => { await coordinator.nodesChanged(m); return {}; },
  };
  const answer = (reply) => process.stdout.write(JSON.stringify(reply) + '\n');
  createInterface({ input: process.stdin, crlfDelay: Infinity }).on('line', async (line) => {
    if (!line.trim()) return;
    const m = JSON.parse(line);
    try {
      const handler = handlers[m.type];
      if (!handler) throw new Error(`unknown request type ${m.type}`);
      answer({ type: `${m.type}_ok`, in_reply_to: m.msg_id, ...(await handler(m)) });
    } catch (err) {
      const code = err instanceof GaveUp ? 'gave_up' : 'failed';
      if (code === 'failed') coordinator.log(err.stack);
      answer({ type: 'error', in_reply_to: m.msg_id, code, message: err.message });
    }
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main();
