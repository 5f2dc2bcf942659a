// Planted bug (accounting): a release closes the session but never frees its positions.
import { Engine, serve } from '../../examples/node-host/host.mjs';

class ReleaseKeepsCache extends Engine {
  close(op, obj) {
    const before = this.used;
    super.close(op, obj);
    if (op === 'release') this.used = before;
  }
}
serve({ EngineClass: ReleaseKeepsCache });
