// The server's change stream (/v1/watch, Server-Sent Events) read with fetch, so that it carries the bearer
// token in a header as every other call does. One stream per page; it resumes after the last revision seen.

import { session } from "./api.js";

export function watch({ kind, project, since: from = null, onChange, onReset }) {
  const controller = new AbortController();
  let since = from;
  let stopped = false;

  async function run() {
    while (!stopped) {
      const params = new URLSearchParams();
      if (kind) params.set("kind", kind);
      if (project) params.set("project", project);
      if (since !== null) params.set("since", String(since));
      try {
        const answer = await fetch(`/v1/watch?${params}`, {
          headers: { Authorization: `Bearer ${session.token}`, Accept: "text/event-stream" },
          signal: controller.signal,
        });
        if (!answer.ok) throw new Error(`watch: HTTP ${answer.status}`);
        await read(answer.body.getReader());
      } catch (error) {
        if (stopped) return;
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }

  async function read(reader) {
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
        dispatch(block);
      }
    }
  }

  function dispatch(block) {
    const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
    if (!data) return;
    const change = JSON.parse(data);
    if (change.type === "ERROR") {
      since = null;
      onReset?.();
      return;
    }
    since = change.revision;
    onChange(change);
  }

  run();
  return () => {
    stopped = true;
    controller.abort();
  };
}
