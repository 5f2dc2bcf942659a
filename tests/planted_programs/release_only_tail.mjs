// Planted: release reaches only the tail's node; the other stages keep the session's cache.
import { Coordinator, main } from '../../examples/node-coordinator/coordinator.mjs';

class Planted extends Coordinator {
  async release(m) {
    const s = this.sessions.get(m.session_id);
    const tail = this.stages[this.stages.length - 1];
    for (const [name, node] of s.touched) if (!tail.includes(node)) s.touched.delete(name);
    return super.release(m);
  }
}

main(new Planted());
