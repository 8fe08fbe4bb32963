import { describe, expect, it } from "vitest";
import { boundPodAwaits, SKIP_AWAIT_ANNOTATION, skipPodAwaits, TIMEOUT_ANNOTATION } from "./awaits.ts";

const args = (type: string, props: Record<string, unknown>) => ({ type, name: "n", custom: true, props, opts: {} });

describe("skipPodAwaits", () => {
  it.each(["kubernetes:apps/v1:Deployment", "kubernetes:core/v1:Service"])(
    "marks a %s, keeping its annotations",
    (t) => {
      const props = { metadata: { name: "x", annotations: { keep: "me" } }, spec: {} };
      const out = skipPodAwaits(args(t, props));
      expect(out?.props.metadata).toEqual({ name: "x", annotations: { keep: "me", [SKIP_AWAIT_ANNOTATION]: "true" } });
      expect(props.metadata.annotations).toEqual({ keep: "me" }); // a copy, not a mutation
    },
  );

  it("leaves every other kind alone", () => {
    expect(skipPodAwaits(args("kubernetes:core/v1:ConfigMap", { metadata: { name: "x" } }))).toBeUndefined();
  });
});

describe("boundPodAwaits", () => {
  it("sets the provider's await timeout on a Deployment, keeping its annotations", () => {
    const props = { metadata: { name: "x", annotations: { keep: "me" } } };
    const out = boundPodAwaits(240)(args("kubernetes:apps/v1:Deployment", props));
    expect(out?.props.metadata.annotations).toEqual({ keep: "me", [TIMEOUT_ANNOTATION]: "240" });
    expect(props.metadata.annotations).toEqual({ keep: "me" });
  });

  it("leaves every other kind alone", () => {
    expect(boundPodAwaits(240)(args("kubernetes:core/v1:Secret", { metadata: {} }))).toBeUndefined();
  });
});
