// Planted: a connection that breaks after the request was sent (a reset, a dropped answer)
// is taken for the end of the session: the request gives up at once instead of replaying.
import { Coordinator, GaveUp, main } from '../../examples/node-coordinator/coordinator.mjs';

class Planted extends Coordinator {
  async recover(s, err) {
    if (err.code === 'response_lost') throw new GaveUp(`session ${s.id}: ${err.message}`);
    return super.recover(s, err);
  }
}

main(new Planted());
