// VM actions through virt-api's subresources, and delete; a refusal shows the API's own message.
import { request, SUBRESOURCES, VM_API } from "./api.js";
import { h, notify } from "./dom.js";

const vmPath = (vm, sub) => `${SUBRESOURCES}/namespaces/${vm.metadata.namespace}/virtualmachines/${vm.metadata.name}/${sub}`;
const vmiPath = (vm, sub) =>
  `${SUBRESOURCES}/namespaces/${vm.metadata.namespace}/virtualmachineinstances/${vm.metadata.name}/${sub}`;

export const ACTIONS = [
  { name: "Start", run: (vm) => request("PUT", vmPath(vm, "start"), {}) },
  { name: "Stop", run: (vm) => request("PUT", vmPath(vm, "stop"), {}) },
  {
    name: "Force stop",
    confirm: "Force stop: the guest is killed without a shutdown.",
    run: (vm) => request("PUT", vmPath(vm, "stop"), { gracePeriod: 0 }),
  },
  { name: "Restart", run: (vm) => request("PUT", vmPath(vm, "restart"), {}) },
  { name: "Pause", run: (vm) => request("PUT", vmiPath(vm, "pause"), {}) },
  { name: "Unpause", run: (vm) => request("PUT", vmiPath(vm, "unpause"), {}) },
  { name: "Migrate", run: (vm) => request("PUT", vmPath(vm, "migrate"), {}) },
  {
    name: "Delete",
    confirm: "Delete this VM?",
    run: (vm) => request("DELETE", `${VM_API}/namespaces/${vm.metadata.namespace}/virtualmachines/${vm.metadata.name}`),
  },
];

export function actionButtons(vm, names) {
  const label = `${vm.metadata.namespace}/${vm.metadata.name}`;
  return h(
    "div",
    { className: "actions", role: "group", "aria-label": `Actions for ${label}` },
    ACTIONS.filter((a) => !names || names.includes(a.name)).map((action) =>
      h(
        "button",
        {
          type: "button",
          "data-action": action.name.toLowerCase().replace(" ", "-"),
          "aria-label": `${action.name} ${label}`,
          onclick: async () => {
            if (action.confirm && !window.confirm(action.confirm)) return;
            try {
              await action.run(vm);
              notify(`${action.name}: requested for ${label}`, "ok");
            } catch (error) {
              notify(`${action.name} ${label} refused: ${error.message}`);
            }
          },
        },
        action.name,
      ),
    ),
  );
}
