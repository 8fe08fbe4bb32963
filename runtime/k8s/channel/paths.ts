// Where the command channel lives in a pod; a leaf, so the archive code can leave it out of
// snapshots and downloads without importing the channel.

/** the helper and its daemon's socket, in a private directory on the pod's writable /tmp */
export const HELPER_DIR = "/tmp/.sbx-helper";
