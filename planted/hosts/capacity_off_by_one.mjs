// Planted bug (capacity): the room check compares with >= one too late, so an allocation of
// one position more than is free is made.
import { Engine, serve } from '../../examples/node-host/host.mjs';

class CapacityOffByOne extends Engine {
  checkRoom(op, ids, n, freed) { super.checkRoom(op, ids, n - 1, freed); }
}
serve({ EngineClass: CapacityOffByOne });
