// Planted bug (errors): a cache miss says the node expects the call's own position, not 0,
// so a coordinator that replays from `expected` replays nothing.
import { Engine, serve } from '../../examples/node-host/host.mjs';

class CacheMissExpectedWrong extends Engine {
  cacheMiss(op, ids, start) {
    const error = super.cacheMiss(op, ids, start);
    error.expected = start;
    return error;
  }
}
serve({ EngineClass: CacheMissExpectedWrong });
