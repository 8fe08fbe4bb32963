// N manager replicas as separate processes against the test control plane, sharing one
// admission budget through the shares Lease (runtime/k8s/budget), clients spread round-robin.
// Scenarios (bench/k8s/replicasScenarios.ts): a burst of creates past the budget, the same burst
// with one replica SIGKILLed in the middle, a closed loop of clients doing create -> kill,
// concurrent warm claims, and `stream` (bench/k8s/replicasStream.ts): --streaming sandboxes each
// running one streaming exec for --streamSeconds, with a create every --probeMs meanwhile, over
// the command channel (the default) and/or the per-exec websocket path (--streamPaths).
// --streaming alone runs only `stream`; without it the default run is burst,kill,loop,warm.
// Prints JSON and a table.
//   npx tsx bench/k8s/replicas.ts [--replicas 3] [--budget 1000] [--burst 1500] [--clients 50]
//     [--loopSeconds 20] [--claimers 40] [--scenarios burst,kill,loop,warm,stream] [--leaseSeconds 15]
//     [--streaming 500] [--streamSeconds 60] [--streamPaths channel,websocket] [--probeMs 50]
//     [--ticker read|sleep]
import { arg } from "./env.ts";
import { benchScenarios } from "./replicasScenarios.ts";

const streamingGiven = process.argv.includes("--streaming");
await benchScenarios({
  replicas: Number(arg("replicas", "3")),
  budget: Number(arg("budget", "1000")),
  burst: Number(arg("burst", "1500")),
  clients: Number(arg("clients", "50")),
  loopSeconds: Number(arg("loopSeconds", "20")),
  claimers: Number(arg("claimers", "40")),
  scenarios: arg("scenarios", streamingGiven ? "stream" : "burst,kill,loop,warm").split(","),
  leaseSeconds: Number(arg("leaseSeconds", "15")),
  streaming: Number(arg("streaming", "500")),
  streamSeconds: Number(arg("streamSeconds", "60")),
  streamPaths: arg("streamPaths", "channel").split(","),
  probeMs: Number(arg("probeMs", "50")),
  ticker: arg("ticker", "read"),
});
