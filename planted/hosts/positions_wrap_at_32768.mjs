// Planted bug (lengths): a session's count of cached positions is a 16-bit signed field's
// worth, so it wraps at 32,768.
import { Engine, serve } from '../../examples/node-host/host.mjs';

class PositionsWrap extends Engine {
  positions(count) { return count % 32768; }
}
serve({ EngineClass: PositionsWrap });
