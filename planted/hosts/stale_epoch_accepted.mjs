// Planted bug (fencing): an older epoch is not refused; the call is served as if it were current.
import { Engine, serve } from '../../examples/node-host/host.mjs';

class StaleEpochAccepted extends Engine {
  stale() { return false; }
}
serve({ EngineClass: StaleEpochAccepted });
