// A manager process for manager-restart.test.ts: starts its own Kubernetes backend (role
// manager: no Lease), runs one streaming command in the given sandbox over the channel, prints
// {"commandId": ...} and then every output line it reads as JSON lines, until it is SIGKILLed.
// argv: <kubeconfig path> <sandboxes namespace> <runtime namespace> <sandbox id>
import { PassThrough } from "node:stream";
import { adminClients, testConfig, testPlatform } from "../runtime/support.ts";

const [kubeconfig, sandboxes, runtime, id] = process.argv.slice(2);
const config = testConfig({ sandboxes, runtime, cleanup: async () => undefined });
const { backend } = testPlatform(config, adminClients(kubeconfig), { identity: "doomed-manager" }, "manager");
await backend.start();
await backend.awaitReady(id, { timeoutMs: 60_000 });
// stdin stays open (a stream that never ends) for the manager that re-attaches: a reader in the
// background echoes each line it gets (fd 3: an asynchronous list's own stdin is /dev/null)
const session = await backend.exec(id, {
  command: [
    "sh",
    "-c",
    "exec 3<&0; { while read x <&3; do echo stdin-$x; done; } & i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo line-$i; sleep 0.1; done",
  ],
  stdin: new PassThrough(),
});
const commandId = (session as { commandId?: string }).commandId;
process.stdout.write(`${JSON.stringify({ commandId, mode: (await backend.describe(id))?.commandChannel })}\n`);
session.stderr.resume();
session.stdout.on("data", (c: Buffer) => process.stdout.write(`${JSON.stringify({ out: c.toString() })}\n`));
session.result.then(
  (r) => process.stdout.write(`${JSON.stringify({ result: r })}\n`),
  (err: Error) => process.stdout.write(`${JSON.stringify({ error: err.message })}\n`),
);
