// Planted bug (crash): a restart brings the node back up with its sessions, as a process that
// reloads a KV cache snapshot it should have dropped.
import { Engine, serve } from '../../examples/node-host/host.mjs';

class RestartKeepsCache extends Engine {
  restart() {
    if (this.sessions === undefined) super.restart();
    this.crashed = false;
  }
}
serve({ EngineClass: RestartKeepsCache });
