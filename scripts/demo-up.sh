#!/usr/bin/env bash
# `make up`: start the embedded cluster, boot the demo VM, show its console's first lines and what to try next.
# Run after `make setup guest-image`. PYKUBEVIRT_DATA_DIR / PYKUBEVIRT_LISTEN choose another data dir / address.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA_DIR=${PYKUBEVIRT_DATA_DIR:-/var/lib/pykubevirt}
export PYKUBEVIRT_DATA_DIR=$DATA_DIR
BIN=$PWD/.venv/bin
export PATH=$BIN:$PATH
IMAGE=pykubevirt.local/demo-guest:1.0
export KUBECONFIG=$DATA_DIR/apiserver/kubeconfig

# The host first: a FAIL (a taken port, no /dev/net/tun, a full disk...) stops here with its fix, not mid-start.
if ! pykubevirt doctor; then
  echo "make up: fix the FAIL rows above (or see \`pykubevirt doctor --help\`), then run make up again" >&2
  exit 1
fi
pykubevirt image import "$IMAGE" _output/guest/demo-guest.img >/dev/null
scripts/import-kernel-image.sh _output/guest/demo-guest.img >/dev/null  # examples/vm-kernel-boot.yaml
pykubevirt up
kubectl apply -f examples/vm-demo.yaml
kubectl wait vm/demo --for=condition=Ready --timeout=180s >/dev/null
kubectl get vm demo

# The guest's serial console, as `kubectl logs` shows it (KubeVirt's guest-console-log container).
uid=$(kubectl get vmi demo -o jsonpath='{.metadata.uid}')
pod=$(kubectl get pod -l "kubevirt.io/created-by=$uid" -o jsonpath='{.items[0].metadata.name}')
echo "waiting for the guest to boot (TCG here: about 10 s)..."
for _ in $(seq 1 120); do
  if kubectl logs "$pod" -c guest-console-log 2>/dev/null | grep -q "hello from pykubevirt"; then break; fi
  sleep 1
done
# Bridge binding on the pod network: the guest holds its pod's IP, and this host routes the pod network.
ip=$(kubectl get vmi demo -o jsonpath='{.status.interfaces[0].ipAddress}')
for _ in $(seq 1 60); do
  if kubectl logs "$pod" -c guest-console-log 2>/dev/null | grep -q "pykubevirt-guest: eth0 $ip"; then break; fi
  sleep 1
done
echo "---- kubectl logs $pod -c guest-console-log ----"
kubectl logs "$pod" -c guest-console-log | grep -a "pykubevirt-guest\|hello from" | head -n 12
echo "---- curl http://$ip/ ----"
curl -s --max-time 5 --retry 20 --retry-delay 1 --retry-all-errors "http://$ip/" || echo "(the guest did not answer yet)"
echo "------------------------------------------------"
console_line=$(pykubevirt status 2>/dev/null | grep '^web console:' || true)
cat <<EOF

The demo VM runs at $ip, its pod's IP. To reach it:
  curl http://$ip/                  # the guest's web page (busybox httpd)
  export KUBECONFIG=$KUBECONFIG
  export PATH=$BIN:\$PATH
  kubectl get vm,vmi                # the IP column is the guest's address
  virtctl console demo              # the guest's shell; Ctrl+] leaves
  virtctl stop demo / virtctl start demo / virtctl pause vm demo
  pykubevirt status                 # components and nodes
  pykubevirt down                   # stop the cluster (guests keep running; --all stops them too)
EOF
if [ -n "$console_line" ]; then echo "$console_line"; fi
