// Planted bug (a failed call changes nothing): a prefill at a newer epoch drops the older
// epoch's cache before it checks that the new one fits, so an out_of_memory loses the session.
import { Engine, serve } from '../../examples/node-host/host.mjs';

class FailedCallChangesState extends Engine {
  checkRoom(op, ids, n, freed) {
    if (freed > 0) {
      this.sessions.delete(ids.sessionId);
      this.used -= freed;
      super.checkRoom(op, ids, n, 0);
      this.used += freed; // the caller takes the freed positions off again
      return;
    }
    super.checkRoom(op, ids, n, freed);
  }
}
serve({ EngineClass: FailedCallChangesState });
