// Planted: a stale answer accepted after a re-route.  Node calls go over one connection per
// node that is never resynchronised after a timeout (a hand-made HTTP client's classic slip):
// an answer that comes after its call timed out stays unread on the connection, and the next
// call to that node, made after the session was re-routed and replayed elsewhere, is answered
// with it.  The coordinator checks an answer's kind and shape, not whose it is (session,
// epoch, position), so it takes the stale answer for the answer to its call.
// A short call timeout (100 ms) makes late answers common: a fault plan's Delay, scaled by
// the harness, holds an answer up to 750 ms.
process.env.FAKESHARD_CALL_TIMEOUT_MS ??= '100';
const { CallFailed, Coordinator, main } = await import('../../examples/node-coordinator/coordinator.mjs');

class Planted extends Coordinator {
  constructor() {
    super();
    this.unread = new Map(); // node name -> the answer waiting on its connection
  }

  async call(node, op, bundle, timeoutMs) {
    const answer = this.post(`${node.url}/v1/${op}`, bundle, node, 60_000); // never given up on
    if (this.unread.has(node.name)) {
      const stale = this.unread.get(node.name);
      this.unread.delete(node.name);
      this.keepUnread(node, answer);
      return stale;
    }
    let timer;
    const late = new Promise((resolve, reject) => {
      timer = setTimeout(() => reject(new CallFailed(node, 'timeout', 'no answer in time')), timeoutMs);
    });
    try {
      return await Promise.race([answer, late]);
    } catch (err) {
      if (err.code === 'timeout') this.keepUnread(node, answer);
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  keepUnread(node, answer) {
    answer.then((data) => this.unread.set(node.name, data), () => {});
  }

  problem(node, request, out, last) {
    // Whose answer it is goes unchecked: the request is taken to be the one the answer names.
    const named = { ...request, session_id: out.session_id, epoch: out.epoch,
                    start_pos: last ? out.pos - request.tokens.length : out.start_pos };
    return super.problem(node, named, out, last);
  }
}

main(new Planted());
