// Planted bug (validation): a hidden bundle's checksum is never compared, so a damaged
// activation is computed on.
import { Engine, serve } from '../../examples/node-host/host.mjs';

class ChecksumUnchecked extends Engine {
  sealed() { return true; }
}
serve({ EngineClass: ChecksumUnchecked });
