// Planted: every stage's answer is passed on unchecked (its session, epoch, positions, token
// range), and the tail's token is taken as it comes.
import { Coordinator, main } from '../../examples/node-coordinator/coordinator.mjs';

class Planted extends Coordinator {
  problem() {
    return null;
  }
}

main(new Planted());
