#!/usr/bin/env python3
"""Regenerates kerf's embedded EC2 instance-type catalog from the data files shipped in the moto package.

moto (https://pypi.org/project/moto/) ships a snapshot of EC2 DescribeInstanceTypes and
DescribeInstanceTypeOfferings answers. This script keeps only the facts kerf needs to compute labels,
capacity and overhead (see docs/catalog.md), plus the zones that offer each type, and writes one compact
JSON file per region. It copies no prices: prices come from a pricing file or AWS at run time.

Standard library only. Usage (see catalog/README.md):

    python3 catalog/generate.py [--moto DIR] [--regions us-east-1,us-west-2] [--out catalog]

DIR is the directory of the `moto` package (the one holding `ec2/`); without it the installed moto is used.
"""

import argparse
import gzip
import json
import pathlib
import re
import sys

# The architectures Karpenter launches (it asks EC2 only for these); the first one a type lists wins, so
# `i386, x86_64` types count as x86_64. Apple (`*_mac`) types are left out, as Karpenter leaves them out.
ARCHITECTURES = ("x86_64", "arm64")
# The purchase options Karpenter turns into offerings; `capacity-block` needs a reservation.
USAGE_CLASSES = ("on-demand", "spot")
DEFAULT_REGIONS = ("us-east-1", "us-west-2")


def moto_dir(given):
    if given:
        return pathlib.Path(given)
    try:
        import moto  # noqa: PLC0415 - only needed when no directory is given
    except ImportError:
        sys.exit("moto is not installed: pip download --no-deps 'moto[server]', unpack it, and pass --moto DIR")
    return pathlib.Path(moto.__file__).parent


def moto_version(root):
    match = re.search(r'__version__\s*=\s*"([^"]+)"', (root / "__init__.py").read_text())
    return match.group(1) if match else "unknown"


def load(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def architecture(info):
    return next((a for a in info["ProcessorInfo"]["SupportedArchitectures"] if a in ARCHITECTURES), None)


def compact(info, zones):
    """The facts of one type, in the field names kerf's `InstanceTypeInfo` reads; defaults are omitted."""
    network = info["NetworkInfo"]
    processor = info["ProcessorInfo"]
    default_card = network["DefaultNetworkCardIndex"]
    card = next(c for c in network["NetworkCards"] if c["NetworkCardIndex"] == default_card)
    out = {
        "name": info["InstanceType"],
        "arch": architecture(info),
        "vcpus": info["VCpuInfo"]["DefaultVCpus"],
        "memoryMiB": info["MemoryInfo"]["SizeInMiB"],
        "enis": card["MaximumNetworkInterfaces"],
        "ipv4PerEni": network["Ipv4AddressesPerInterface"],
    }
    if processor.get("Manufacturer"):
        out["cpuManufacturer"] = processor["Manufacturer"]
    if processor.get("SustainedClockSpeedInGhz"):
        out["clockMHz"] = round(processor["SustainedClockSpeedInGhz"] * 1000)
    if info.get("Hypervisor"):
        out["hypervisor"] = info["Hypervisor"]
    bandwidth = sum(c.get("BaselineBandwidthInGbps", 0) for c in network["NetworkCards"])
    if bandwidth:
        out["networkMbps"] = round(bandwidth * 1000)
    ebs = info.get("EbsInfo", {})
    if ebs.get("EbsOptimizedSupport") == "default" and "EbsOptimizedInfo" in ebs:
        out["ebsMbps"] = ebs["EbsOptimizedInfo"]["MaximumBandwidthInMbps"]
    if network.get("EncryptionInTransitSupported"):
        out["encryptionInTransit"] = True
    efa = network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
    if efa:
        out["efas"] = efa
    storage = info.get("InstanceStorageInfo")
    if storage and storage.get("TotalSizeInGB"):
        out["instanceStoreGB"] = storage["TotalSizeInGB"]
        if storage.get("NvmeSupport", "unsupported") == "unsupported":
            out["instanceStoreNvme"] = False
    gpus = info.get("GpuInfo", {}).get("Gpus", [])
    if gpus:
        out["gpus"] = [
            {"name": g["Name"], "manufacturer": g["Manufacturer"], "count": g["Count"],
             "memoryMiB": g["MemoryInfo"]["SizeInMiB"]}
            for g in gpus
        ]
    accelerators = info.get("InferenceAcceleratorInfo", {}).get("Accelerators", [])
    if accelerators:
        out["inferenceAccelerators"] = [
            {"name": a["Name"], "manufacturer": a["Manufacturer"], "count": a["Count"]} for a in accelerators
        ]
    neurons = info.get("NeuronInfo", {}).get("NeuronDevices", [])
    if neurons:
        out["neuronDevices"] = [
            {"name": d["Name"], "count": d["Count"], "coresPerDevice": d["CoreInfo"]["Count"]} for d in neurons
        ]
    usage = [u for u in USAGE_CLASSES if u in info["SupportedUsageClasses"]]
    if usage != list(USAGE_CLASSES):
        out["capacityTypes"] = usage
    out["zones"] = zones
    return out


def region_catalog(root, types, region, version):
    offerings = load(root / "ec2/resources/instance_type_offerings/availability-zone" / f"{region}.json.gz")
    zones = {}
    for offering in offerings:
        zone = offering["Location"]
        suffix = zone[len(region):]
        if not zone.startswith(region) or len(suffix) != 1:
            sys.exit(f"{region}: zone {zone} is not the region name plus one letter; extend the zone encoding")
        zones.setdefault(offering["InstanceType"], set()).add(suffix)
    entries = []
    for name in sorted(zones):
        info = types.get(name)
        if info is None or architecture(info) is None or "hvm" not in info["SupportedVirtualizationTypes"]:
            continue
        if not any(u in info["SupportedUsageClasses"] for u in USAGE_CLASSES):
            continue
        entries.append(compact(info, "".join(sorted(zones[name]))))
    return {
        "region": region,
        "source": f"moto {version} (ec2/resources), generated by catalog/generate.py",
        "instanceTypes": entries,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moto", help="directory of the moto package (default: the installed moto)")
    parser.add_argument("--regions", default=",".join(DEFAULT_REGIONS), help="comma-separated regions")
    parser.add_argument("--out", default=str(pathlib.Path(__file__).parent), help="output directory")
    args = parser.parse_args()

    root = moto_dir(args.moto)
    version = moto_version(root)
    types = load(root / "ec2/resources/instance_types.json.gz")
    for region in filter(None, args.regions.split(",")):
        catalog = region_catalog(root, types, region, version)
        path = pathlib.Path(args.out) / f"{region}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        # One type per line: compact, yet diffs of a refresh stay readable.
        lines = [json.dumps(entry, separators=(",", ":"), sort_keys=False) for entry in catalog["instanceTypes"]]
        header = json.dumps({k: v for k, v in catalog.items() if k != "instanceTypes"}, separators=(",", ":"))
        path.write_text(header[:-1] + ',"instanceTypes":[\n' + ",\n".join(lines) + "\n]}\n", encoding="utf-8")
        print(f"{path}: {len(lines)} instance types, {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
