// Runs one pause or resume on the test cluster as its own runtime replica and SIGKILLs itself
// right after the named durable step, as a crashed manager would die.
// argv: <json PauseRuntimeArgs without onStep> <pause|resume> <id> <step>
import { type PauseRuntimeArgs, startPauseRuntime } from "./runtime.ts";

const [argsJson, op, id, crashAt] = process.argv.slice(2);
const args = JSON.parse(argsJson) as PauseRuntimeArgs;
const rt = await startPauseRuntime({
  ...args,
  onStep: (_id, step) => {
    if (step === crashAt) process.kill(process.pid, "SIGKILL");
  },
});
const run = op === "pause" ? rt.snap.snapshotter.pause(id) : rt.snap.snapshotter.resume(id);
run.then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
