// A manager SIGKILLed while a command streams: the command belongs to the pod's helper daemon,
// not to the manager or its channel, so it goes on; a new manager lists it, re-attaches by id
// and reads on (the daemon's ring replays what nobody read meanwhile), writes its stdin, and can
// still kill it.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Readable } from "node:stream";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import type { KubernetesBackend } from "../../../runtime/kubernetes.ts";
import { waitFor } from "../../support/cluster.ts";
import { startTestBackend, type TestBackend, type TestNamespaces, testSandboxSpec } from "../runtime/support.ts";

let t: TestBackend;
let kubeconfig: string;
let ns: TestNamespaces;
let config: RuntimeConfig;
let backend: KubernetesBackend;

beforeAll(async () => {
  t = await startTestBackend("rt-chrs");
  ({ kubeconfig, ns, config, backend } = t);
});

afterAll(async () => {
  await t?.close();
});

it("a command outlives its SIGKILLed manager; a new manager lists it, re-attaches by id and reads on", async () => {
  await backend.provision(testSandboxSpec(config, "ch-survive"));
  await backend.awaitReady("ch-survive", { timeoutMs: 60_000 });

  const child = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      join(import.meta.dirname, "manager-child.ts"),
      kubeconfig,
      ns.sandboxes,
      ns.runtime,
      "ch-survive",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let stderr = "";
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once("exit", (_c, s) => resolve(s)));
  let commandId: string | undefined;
  let seen = "";
  for await (const line of createInterface({ input: child.stdout })) {
    const msg = JSON.parse(line) as { commandId?: string; mode?: string; out?: string };
    if (msg.commandId) {
      expect(msg.mode, "the doomed manager used the channel").toBe("helper");
      commandId = msg.commandId;
    }
    seen += msg.out ?? "";
    if (seen.includes("line-3\n")) break;
  }
  expect(commandId, `the child manager's stderr: ${stderr}`).toBeDefined();
  child.kill("SIGKILL");
  expect(await exited).toBe("SIGKILL");

  // the command is still there, running, in the pod's registry
  const listed = await backend.commands.list("ch-survive");
  expect(listed).toEqual(expect.arrayContaining([expect.objectContaining({ id: commandId, state: "running" })]));

  // the new reader writes the command's stdin too (the dead manager never ended it)
  const again = (await backend.commands.attach("ch-survive", commandId!, Readable.from(["from-the-new-manager\n"])))!;
  let out = "";
  again.stdout.on("data", (c: Buffer) => (out += c.toString()));
  again.stderr.resume();
  // the ring replays from the first line, and lines the dead manager never saw follow
  await waitFor(
    "output past the crash",
    async () => {
      const nums = [...out.matchAll(/line-(\d+)/g)].map((m) => Number(m[1]));
      return nums.length > 0 && Math.max(...nums) > [...seen.matchAll(/line-(\d+)/g)].length + 5;
    },
    30_000,
  );
  expect(out.startsWith("line-1\nline-2\nline-3\n")).toBe(true);
  await waitFor("the re-attached reader's stdin to reach the command", async () =>
    out.includes("stdin-from-the-new-manager\n"),
  );
  again.kill();
  expect(await again.result).toMatchObject({ exitCode: 137, timedOut: false, oomKilled: false });
  const after = await backend.commands.list("ch-survive");
  expect(after?.find((c) => c.id === commandId)).toMatchObject({ state: "exited", exit: "killed:137" });
});
