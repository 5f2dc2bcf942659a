// Planted: nodes_changed adds the nodes that joined but keeps the ones that left in the
// routing table, so sessions go on being sent to a node the coordinator was told is gone.
import { Coordinator, main } from '../../examples/node-coordinator/coordinator.mjs';

class Planted extends Coordinator {
  async nodesChanged(m) {
    const before = this.stages;
    await super.nodesChanged(m);
    this.stages = this.stages.map((stage, i) => [...(before[i] ?? []).filter((n) => !stage.includes(n)), ...stage]);
  }
}

main(new Planted());
