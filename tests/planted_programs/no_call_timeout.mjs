// Planted: node calls have no timeout, so a call swallowed by a partition that hangs is
// waited for forever.
process.env.FAKESHARD_CALL_TIMEOUT_MS = String(2 ** 31 - 1);
const { main } = await import('../../examples/node-coordinator/coordinator.mjs');

main();
