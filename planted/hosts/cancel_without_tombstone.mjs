// Planted bug (tombstones): a cancel of a session the node never saw records nothing, so a
// prefill that arrives after it (a late one, racing the cancel) is served.
import { Engine, serve } from '../../examples/node-host/host.mjs';

class CancelWithoutTombstone extends Engine {
  close(op, obj) {
    const known = obj !== null && this.sessions.has(obj.session_id);
    super.close(op, obj);
    if (op === 'cancel' && !known) this.sessions.delete(obj.session_id);
  }
}
serve({ EngineClass: CancelWithoutTombstone });
