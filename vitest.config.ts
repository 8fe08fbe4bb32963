import { defineConfig } from "vitest/config";

// Two projects: `unit` needs nothing but Node and Linux; `k8s` runs against the real
// control plane that test/setup/control-plane.ts builds and starts once per run.
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "unit",
          include: ["**/*.test.ts"],
          exclude: ["node_modules/**", ".cache/**", "test/k8s/**"],
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: "k8s",
          include: ["test/k8s/**/*.test.ts"],
          globalSetup: ["test/setup/control-plane.ts"],
          testTimeout: 180_000,
          hookTimeout: 600_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
