"""`virtctl create vm|instancetype|preference` without a server: the manifests each set of flags gives, upstream's
errors and warnings, and the YAML as kubectl reads it back."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykubevirt.virtctl.main import main

SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"


def create(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict[str, Any], str]:
    """The manifest virtctl printed, and its stderr."""
    assert main(["create", *argv]) == 0
    out, err = capsys.readouterr()
    return yaml.safe_load(out), err


def refused(capsys: pytest.CaptureFixture[str], *argv: str, warnings: int = 0) -> str:
    """The one line virtctl printed on failing (status 1) after any warnings, with nothing on stdout."""
    assert main(["create", *argv]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 + warnings, (out, err)
    return err.splitlines()[-1]


def template(vm: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = vm["spec"]["template"]["spec"]
    return spec


def test_a_vm_with_no_flags_has_upstreams_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    vm, err = create(capsys, "vm")
    assert err == ""
    assert (vm["apiVersion"], vm["kind"]) == ("kubevirt.io/v1", "VirtualMachine")
    assert re.fullmatch(f"vm-{SUFFIX}", vm["metadata"]["name"]) and "namespace" not in vm["metadata"]
    assert vm["spec"] == {
        "runStrategy": "Always",
        "template": {
            "metadata": {},
            "spec": {
                "domain": {"devices": {}, "memory": {"guest": "512Mi"}, "resources": {}},
                "terminationGracePeriodSeconds": 180,
            },
        },
    }
    assert vm["status"] == {}
    # Two runs, two names.
    assert create(capsys, "vm")[0]["metadata"]["name"] != vm["metadata"]["name"]


def test_name_namespace_run_strategy_memory_and_grace_period(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["vm", "--name=web", "-n", "prod", "--run-strategy", "rerunonfailure", "--memory=1024Mi"]
    vm, _ = create(capsys, *argv, "--termination-grace-period", "30")
    assert vm["metadata"] == {"name": "web", "namespace": "prod"}
    assert vm["spec"]["runStrategy"] == "RerunOnFailure"
    # The quantity as resource.Quantity writes it.
    assert template(vm)["domain"]["memory"] == {"guest": "1Gi"}
    assert template(vm)["terminationGracePeriodSeconds"] == 30
    assert refused(capsys, "vm", "--run-strategy=Sometimes") == (
        'failed to parse "--run-strategy" flag: invalid run strategy "Sometimes", supported values are: '
        "Always, Manual, Halted, Once, RerunOnFailure"
    )
    assert refused(capsys, "vm", "--memory=lots").startswith('failed to parse "--memory" flag: quantities must match')


def test_instancetype_and_preference_replace_the_memory(capsys: pytest.CaptureFixture[str]) -> None:
    vm, _ = create(capsys, "vm", "--instancetype=u1.small", "--preference", "VirtualMachinePreference/fedora")
    assert vm["spec"]["instancetype"] == {"name": "u1.small"}
    assert vm["spec"]["preference"] == {"name": "fedora", "kind": "virtualmachinepreference"}
    assert "memory" not in template(vm)["domain"]
    assert refused(capsys, "vm", "--instancetype=pod/x") == (
        'failed to parse "--instancetype" flag: invalid instancetype kind "pod", supported values are: '
        "virtualmachineinstancetype, virtualmachineclusterinstancetype"
    )
    assert refused(capsys, "vm", "--preference=a/b/c") == (
        'failed to parse "--preference" flag: invalid count 2 of slashes in prefix/name'
    )
    # cobra's mutually exclusive groups, the flags that were set listed sorted.
    assert refused(capsys, "vm", "--memory=1Gi", "--instancetype=x") == (
        "if any flags in the group [memory instancetype infer-instancetype infer-instancetype-from] are set none of "
        "the others can be; [instancetype memory] were all set"
    )
    assert refused(capsys, "vm", "--user=a", "--cloud-init-user-data=I2Nsb3VkLWNvbmZpZw==").endswith(
        "[cloud-init-user-data user] were all set"
    )


def test_volumes_in_upstreams_order_with_boot_orders(capsys: pytest.CaptureFixture[str]) -> None:
    vm, _ = create(
        capsys,
        *("vm", "--name=multi", "--volume-import=type:ds,src:os-images/fedora,size:20Gi,name:root,bootorder:1"),
        *("--volume-pvc=src:data", "--volume-containerdisk=src:quay.io/c/alpine:3", "--volume-containerdisk"),
        "src:reg/x,name:second,bootorder:2",
    )
    volumes = template(vm)["volumes"]
    assert [v["name"] for v in volumes] == ["multi-containerdisk-0", "second", "data", "root"]
    assert volumes[0]["containerDisk"] == {"image": "quay.io/c/alpine:3"}
    assert volumes[2]["persistentVolumeClaim"] == {"claimName": "data"}
    assert volumes[3]["dataVolume"] == {"name": "root"}
    assert template(vm)["domain"]["devices"]["disks"] == [
        {"name": "second", "bootOrder": 2},
        {"name": "root", "bootOrder": 1},
    ]
    assert vm["spec"]["dataVolumeTemplates"] == [
        {
            "metadata": {"name": "root"},
            "spec": {
                "sourceRef": {"kind": "DataSource", "name": "fedora", "namespace": "os-images"},
                "storage": {"resources": {"requests": {"storage": "20Gi"}}},
            },
        }
    ]
    # Implicit inference from the lowest boot order, failures ignored on the server.
    assert vm["spec"]["instancetype"] == {"inferFromVolume": "root", "inferFromVolumeFailurePolicy": "Ignore"}
    assert vm["spec"]["preference"] == {"inferFromVolume": "root", "inferFromVolumeFailurePolicy": "Ignore"}
    # The memory stays as the fallback of an implicit inference.
    assert template(vm)["domain"]["memory"] == {"guest": "512Mi"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--volume-containerdisk=name:x"], 'volume-containerdisk: src must be specified'),
        (["--volume-containerdisk=src:a,name:Bad_Name"],
         'volume-containerdisk: invalid name "Bad_Name": a lowercase RFC 1123 label must consist of'),
        (["--volume-containerdisk=src:a,bootorder:0"], 'volume-containerdisk: bootorder must be greater than 0'),
        (["--volume-containerdisk=src:a,bootorder:x"],
         'volume-containerdisk: failed to parse param "bootorder": strconv.ParseUint: parsing "x": invalid '
         'syntax'),
        (["--volume-containerdisk=src:a,bootorder:1", "--volume-pvc=src:p,bootorder:1"],
         'volume-pvc: bootorder 1 was specified multiple times'),
        (["--volume-containerdisk=src:a,colour:red"], 'volume-containerdisk: unknown param(s): colour:red'),
        (["--volume-containerdisk=src"], 'volume-containerdisk: params need to have at least one colon: src'),
        (["--volume-pvc=src:ns/p"], 'volume-pvc: not allowed to specify namespace of pvc "p"'),
        (["--volume-pvc=src:p", "--volume-pvc=src:p"], 'volume-pvc: there is already a volume with name "p"'),
        (["--volume-import=src:x"], 'volume-import: type must be specified'),
        (["--volume-import=type:ftp"],
         'volume-import: invalid volume import type "ftp", see help for supported values'),
        (["--volume-import=type:blank"], 'volume-import: size must be specified'),
        (["--volume-import=type:blank,size:big"], 'volume-import: failed to parse param "size": quantities must match'),
        (["--volume-import=type:http,size:1Gi"], 'volume-import: url is required with http volume source'),
        (["--volume-import=type:imageio,url:u,size:1Gi"],
         'volume-import: url and diskid are both required with imageio volume source'),
        (["--volume-import=type:registry,size:1Gi"],
         'volume-import: exactly one of url or imagestream must be defined'),
        (["--volume-import=type:registry,url:docker://a,pullmethod:pull,size:1Gi"],
         'volume-import: pullmethod must be set to pod or node'),
        (["--volume-import=type:pvc,src:p"], 'volume-import: namespace of pvc "p" must be specified'),
        (["--volume-import=type:vddk,url:u,uuid:1,size:1Gi"],
         'volume-import: thumbprint is required with vddk volume source'),
        (["--volume-sysprep=src:a,type:floppy"],
         'volume-sysprep: invalid sysprep source type "floppy", supported values are: configmap, secret'),
        (["--cloud-init=cdrom", "--user=a"],
         'cloud-init: invalid cloud-init data source type "cdrom", supported values are: nocloud, '
         'configdrive, none'),
        (["--infer-instancetype"], ": at least one volume is needed to infer an instance type or preference"),
        (["--volume-containerdisk=src:a", "--infer-preference"],
         ": inference of instancetype or preference works only with datasources, datavolumes or pvcs"),
        (["--volume-pvc=src:a", "--infer-instancetype-from=b"], ': there is no volume with name "b"'),
        (["--volume-import=type:http,url:u,size:1Gi,name:d", "--infer-instancetype-from=d"],
         ": this datavolume is not valid to infer an instancetype or preference from (source needs to be PVC, "
         "Registry or Snapshot, sourceRef needs to be DataSource)"),
        (["--infer-preference=maybe"],
         ': invalid argument "maybe" for "--infer-preference" flag: strconv.ParseBool: parsing "maybe": '
         'invalid syntax'),
    ],
)  # fmt: skip
def test_bad_flags_are_refused_with_upstreams_messages(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """`flag: text` is upstream's `failed to parse "--flag" flag: text`; `: text` an error of no one flag."""
    flag, _, text = message.partition(": ")
    expected = f'failed to parse "--{flag}" flag: {text}' if flag else text
    assert refused(capsys, "vm", *argv).startswith(expected)


def test_every_import_type_makes_its_datavolume_source(capsys: pytest.CaptureFixture[str]) -> None:
    imports = {
        "blank": ("type:blank,size:1Gi", {"source": {"blank": {}}}),
        "web": ("type:http,url:https://h.test/a.img,secretref:s,size:2Gi",
                {"source": {"http": {"url": "https://h.test/a.img", "secretRef": "s"}}}),
        "reg": ("type:registry,url:docker://quay.io/x,pullmethod:node,size:3Gi",
                {"source": {"registry": {"url": "docker://quay.io/x", "pullMethod": "node"}}}),
        "gcs": ("type:gcs,url:gs://b/o,size:1Gi", {"source": {"gcs": {"url": "gs://b/o"}}}),
        "s3": ("type:s3,url:s3://b/o,certconfigmap:c,size:1Gi",
               {"source": {"s3": {"url": "s3://b/o", "certConfigMap": "c"}}}),
        "clone": ("type:pvc,src:other/golden", {"source": {"pvc": {"name": "golden", "namespace": "other"}}}),
        "snap": ("type:snapshot,src:other/s1", {"source": {"snapshot": {"name": "s1", "namespace": "other"}}}),
        "ds": ("type:ds,src:fedora", {"sourceRef": {"kind": "DataSource", "name": "fedora"}}),
    }  # fmt: skip
    argv = [f"--volume-import={params},name:{name}" for name, (params, _) in imports.items()]
    vm, _ = create(capsys, "vm", *argv)
    templates = {t["metadata"]["name"]: t["spec"] for t in vm["spec"]["dataVolumeTemplates"]}
    for name, (_, source) in imports.items():
        storage = templates[name].pop("storage")
        assert templates[name] == source, name
        size = re.search(r"size:(\w+)", imports[name][0])
        # No size: the clone takes the source's, and the storage's resources stay an empty object, as Go writes it.
        assert storage == {"resources": {"requests": {"storage": size.group(1)}} if size else {}}, name
    # No name: one is made up.
    vm, _ = create(capsys, "vm", "--volume-import=type:blank,size:1Gi")
    assert re.fullmatch(f"imported-volume-{SUFFIX}", template(vm)["volumes"][0]["name"])


def test_deprecated_volume_flags_become_imports_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    vm, err = create(capsys, "vm", "--volume-blank=size:1Gi,name:b1", "--volume-clone-pvc=src:ns/p,name:c1")
    # Each is prepended to the imports, as upstream does: the last flag processed comes first.
    assert [v["name"] for v in template(vm)["volumes"]] == ["b1", "c1"]
    assert err.splitlines() == [
        "Flag --volume-clone-pvc has been deprecated, use flag --volume-import instead",
        "Flag --volume-blank has been deprecated, use flag --volume-import instead",
    ]


def test_generated_cloud_init(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text("s3cret\n")
    vm, err = create(
        capsys,
        *("vm", "--user=fedora", f"--password-file={password}", "--ssh-key=ssh-ed25519 AAAA a,ssh-rsa BBBB b"),
        "--ssh-key=ssh-ed25519 CCCC c",
    )
    assert err == "WARNING: --password-file: The password is stored in cleartext in the VM definition!\n"
    (volume,) = template(vm)["volumes"]
    assert volume["name"] == "cloudinitdisk"
    assert volume["cloudInitNoCloud"]["userData"] == (
        "#cloud-config\nuser: fedora\npassword: s3cret\nchpasswd: { expire: False }\nssh_authorized_keys:\n"
        "  - ssh-ed25519 AAAA a\n  - ssh-rsa BBBB b\n  - ssh-ed25519 CCCC c"
    )
    # Given user data is passed on base64-encoded; config drive on request.
    vm, _ = create(
        capsys, "vm", "--cloud-init=configdrive", "--cloud-init-user-data=I2Nsb3Vk", "--cloud-init-network-data=bmV0"
    )
    assert template(vm)["volumes"] == [
        {"name": "cloudinitdisk", "cloudInitConfigDrive": {"userDataBase64": "I2Nsb3Vk", "networkDataBase64": "bmV0"}}
    ]
    # Only the header, unasked for: no disk. Asked for: the disk with the header.
    assert "volumes" not in template(create(capsys, "vm", "--ga-manage-ssh=false")[0])
    assert template(create(capsys, "vm", "--cloud-init=nocloud")[0])["volumes"][0]["cloudInitNoCloud"] == {
        "userData": "#cloud-config"
    }
    vm, err = create(capsys, "vm", "--cloud-init=none", "--ssh-key=k")
    assert "volumes" not in template(vm)
    assert err.startswith("WARNING: --cloud-init: was set to none, not creating a data source")
    # A user alone is nothing lost: no warning.
    vm, err = create(capsys, "vm", "--cloud-init=none", "--user=fedora")
    assert "volumes" not in template(vm) and err == ""
    assert refused(capsys, "vm", "--user=a", f"--password-file={tmp_path / 'none'}", warnings=1).startswith(
        'failed to parse "--password-file" flag: open '
    )


def test_access_credentials(capsys: pytest.CaptureFixture[str]) -> None:
    vm, _ = create(
        capsys, "vm", "--user=cloud-user", "--access-cred=type:ssh,src:my-keys", "--access-cred=type:password,src:pws"
    )
    ssh, password = template(vm)["accessCredentials"]
    assert ssh == {
        "sshPublicKey": {
            "source": {"secret": {"secretName": "my-keys"}},
            "propagationMethod": {"qemuGuestAgent": {"users": ["cloud-user"]}},
        }
    }
    assert password == {
        "userPassword": {
            "source": {"secret": {"secretName": "pws"}},
            "propagationMethod": {"qemuGuestAgent": {}},
        }
    }
    # The guest agent method lets the agent manage the keys (SELinux boolean), in the generated cloud-config.
    user_data = template(vm)["volumes"][0]["cloudInitNoCloud"]["userData"]
    assert user_data.endswith("runcmd:\n  - [ setsebool, -P, 'virt_qemu_ga_manage_ssh', 'on' ]")
    # The nocloud method chooses the data source; configdrive must agree with --cloud-init.
    vm, _ = create(capsys, "vm", "--access-cred=src:keys,method:configdrive")
    assert template(vm)["accessCredentials"][0]["sshPublicKey"]["propagationMethod"] == {"configDrive": {}}
    assert "cloudInitConfigDrive" in template(vm)["volumes"][0]
    assert refused(capsys, "vm", "--cloud-init=nocloud", "--access-cred=src:k,method:configdrive") == (
        'failed to parse "--access-cred" flag: method param and value passed to --cloud-init have to match: '
        "configdrive vs nocloud"
    )
    assert refused(capsys, "vm", "--access-cred=src:k") == (
        'failed to parse "--access-cred" flag: user must be specified with access credential ssh method ga '
        '("--user" flag or param "user")'
    )
    assert refused(capsys, "vm", "--access-cred=type:password,src:k,user:u") == (
        'failed to parse "--access-cred" flag: user cannot be specified with selected access credential type and method'
    )
    assert refused(capsys, "vm", "--access-cred=src:ns/k,user:u") == (
        'failed to parse "--access-cred" flag: not allowed to specify namespace of secret "k"'
    )


def test_explicit_inference_drops_the_memory(capsys: pytest.CaptureFixture[str]) -> None:
    vm, _ = create(capsys, "vm", "--volume-pvc=src:root", "--volume-pvc=src:data", "--infer-instancetype-from=data")
    assert vm["spec"]["instancetype"] == {"inferFromVolume": "data"}
    assert vm["spec"]["preference"] == {"inferFromVolume": "root", "inferFromVolumeFailurePolicy": "Ignore"}
    assert "memory" not in template(vm)["domain"]
    vm, _ = create(capsys, "vm", "--volume-pvc=src:root", "--infer-instancetype=false", "--infer-preference=false")
    assert "instancetype" not in vm["spec"] and "preference" not in vm["spec"]
    # An implicit inference that cannot work is left out without a word.
    vm, err = create(capsys, "vm", "--volume-containerdisk=src:quay.io/x")
    assert "instancetype" not in vm["spec"] and "preference" not in vm["spec"] and err == ""


def test_instancetype_and_preference_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["instancetype", "--cpu", "2", "--memory=2048Mi", "--gpu=name:g1,devicename:nvidia.com/T4"]
    instancetype, _ = create(capsys, *argv, "--iothreadspolicy=auto")
    assert instancetype["apiVersion"] == "instancetype.kubevirt.io/v1beta1"
    assert instancetype["kind"] == "VirtualMachineClusterInstancetype"
    assert re.fullmatch(f"clusterinstancetype-{SUFFIX}", instancetype["metadata"]["name"])
    assert instancetype["spec"] == {
        "cpu": {"guest": 2},
        "memory": {"guest": "2Gi"},
        "gpus": [{"name": "g1", "deviceName": "nvidia.com/T4"}],
        "ioThreadsPolicy": "auto",
    }
    namespaced, _ = create(capsys, "instancetype", "--namespaced", "--name=small", "--cpu=1", "--memory=1Gi")
    assert (namespaced["kind"], namespaced["metadata"]) == ("VirtualMachineInstancetype", {"name": "small"})
    # -n makes it namespaced, in that namespace.
    in_ns, _ = create(capsys, "instancetype", "-n", "team", "--cpu=1", "--memory=1Gi")
    assert in_ns["kind"] == "VirtualMachineInstancetype" and in_ns["metadata"]["namespace"] == "team"
    assert refused(capsys, "instancetype", "--cpu=1") == 'required flag(s) "memory" not set'
    assert refused(capsys, "instancetype") == 'required flag(s) "cpu", "memory" not set'
    assert refused(capsys, "instancetype", "--cpu=0", "--memory=1Gi") == "cpu value must be greater than zero"
    assert refused(capsys, "instancetype", "--cpu=1", "--memory=1Gi", "--iothreadspolicy=dedicated") == (
        'failed to parse "--iothreadspolicy" flag: IOThread must be of value auto or shared'
    )
    assert refused(capsys, "instancetype", "--cpu=1", "--memory=1Gi", "--hostdevice=name:x") == (
        'failed to parse "--hostdevice" flag: deviceName must be specified'
    )

    preference, _ = create(
        capsys, "preference", "--cpu-topology=spread", "--machine-type=q35", "--volume-storage-class=local"
    )
    assert preference["kind"] == "VirtualMachineClusterPreference"
    assert re.fullmatch(f"clusterpreference-{SUFFIX}", preference["metadata"]["name"])
    assert preference["spec"] == {
        "cpu": {"preferredCPUTopology": "spread"},
        "machine": {"preferredMachineType": "q35"},
        "volumes": {"preferredStorageClassName": "local"},
    }
    assert create(capsys, "preference", "--namespaced", "--name=p")[0] == {
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": "VirtualMachinePreference",
        "metadata": {"name": "p"},
        "spec": {},
    }
    assert refused(capsys, "preference", "--cpu-topology=diagonal") == (
        'failed to parse "--cpu-topology" flag: CPU topology must have a value of sockets, cores, threads or spread'
    )


def test_output_is_go_yaml_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["create", "vm", "--name=y", "--user=u", "--volume-containerdisk=src:a"]) == 0
    out = capsys.readouterr().out
    # Keys sorted at every level, lists not indented under their key, the user data as a literal block.
    assert out.startswith("apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: y\nspec:\n")
    assert "      volumes:\n      - containerDisk:\n          image: a\n        name: y-containerdisk-0\n" in out
    assert "          userData: |-\n            #cloud-config\n            user: u\n" in out
    assert out.endswith("status: {}\n")
