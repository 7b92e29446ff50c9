// Nodes: readiness, schedulability for VMs (virt-handler's label), addresses and capacity, kept current by a watch.
import { listWatch } from "./api.js";
import { age, h, notify } from "./dom.js";

export function nodesPage(root) {
  const body = h("tbody");
  root.replaceChildren(
    h("h1", {}, "Nodes"),
    h(
      "div",
      { className: "table-scroll" },
      h(
        "table",
        { "aria-label": "Nodes" },
        h("thead", {}, h("tr", {}, ["Name", "Status", "Schedulable", "Internal IP", "CPU", "Memory", "Age"].map((t) => h("th", { scope: "col" }, t)))),
        body,
      ),
    ),
  );
  const watch = listWatch(
    "/api/v1/nodes",
    (items) =>
      body.replaceChildren(
        ...[...items.values()].map((node) => {
          const ready = (node.status?.conditions || []).find((c) => c.type === "Ready")?.status === "True";
          const ip = (node.status?.addresses || []).find((a) => a.type === "InternalIP")?.address || "";
          return h(
            "tr",
            { "data-node": node.metadata.name },
            h("td", {}, node.metadata.name),
            h("td", { className: ready ? "status-Running" : "status-ErrorUnschedulable" }, ready ? "Ready" : "NotReady"),
            h("td", {}, node.metadata.labels?.["kubevirt.io/schedulable"] === "true" ? "yes" : "no"),
            h("td", {}, ip),
            h("td", {}, node.status?.capacity?.cpu || ""),
            h("td", {}, node.status?.capacity?.memory || ""),
            h("td", {}, age(node.metadata.creationTimestamp)),
          );
        }),
      ),
    (error) => notify(`nodes: ${error.message}`),
  );
  return () => watch.stop();
}
