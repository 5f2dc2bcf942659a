// Planted: after a failure the history is replayed at the same epoch (no new fence), so a
// node that still holds the session refuses the replay, and the coordinator retries in vain.
import { Coordinator, main } from '../../examples/node-coordinator/coordinator.mjs';

class Planted extends Coordinator {
  bump(s) {
    s.needsReplay = true;
  }
}

main(new Planted());
