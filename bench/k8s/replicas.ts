// N manager replicas as separate processes against the test control plane, sharing one
// admission budget through the shares Lease (runtime/k8s/budget), clients spread round-robin.
// Scenarios (bench/k8s/replicasScenarios.ts): a burst of creates past the budget, the same burst
// with one replica SIGKILLed in the middle, a closed loop of clients doing create -> kill, and
// concurrent warm claims. Prints JSON and a table.
//   npx tsx bench/k8s/replicas.ts [--replicas 3] [--budget 1000] [--burst 1500] [--clients 50]
//     [--loopSeconds 20] [--claimers 40] [--scenarios burst,kill,loop,warm] [--leaseSeconds 15]
import { arg } from "./env.ts";
import { benchScenarios } from "./replicasScenarios.ts";

await benchScenarios({
  replicas: Number(arg("replicas", "3")),
  budget: Number(arg("budget", "1000")),
  burst: Number(arg("burst", "1500")),
  clients: Number(arg("clients", "50")),
  loopSeconds: Number(arg("loopSeconds", "20")),
  claimers: Number(arg("claimers", "40")),
  scenarios: arg("scenarios", "burst,kill,loop,warm").split(","),
  leaseSeconds: Number(arg("leaseSeconds", "15")),
});
