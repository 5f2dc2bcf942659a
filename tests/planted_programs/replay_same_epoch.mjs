// Planted: after a failure the history is replayed at the same epoch (no new fence), so a
// node that still holds the session refuses the replay, and the coordinator retries in vain.
import { Coordinator, main } from '../../examples/node-coordinator/coordinator.mjs';

class Planted extends Coordinator {
  bump(s) {
    s.needsReplay = true;
  }

  // Not the bug: its retries wait 5 ms, not the example's back-off of up to a second (its 24
  // attempts in vain took 20 s of real time a run, and each catch runs it four times).
  backoffMs() {
    return 5;
  }
}

main(new Planted());
