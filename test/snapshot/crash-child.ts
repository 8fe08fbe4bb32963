// Runs one pause or resume and SIGKILLs itself right after the named durable step.
// argv: <root> <registryUrl> <pause|resume> <id> <step>
import { makeFixture } from "./fixture.ts";

const [root, registryUrl, op, id, crashAt] = process.argv.slice(2);
const f = makeFixture(root, registryUrl, {
  onStep: (_id, step) => {
    if (step === crashAt) process.kill(process.pid, "SIGKILL");
  },
});
const run = op === "pause" ? f.snapshotter.pause(id) : f.snapshotter.resume(id);
run.then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
