#!/usr/bin/env python3
"""Refreshes catalog/on-demand-prices.json, the on-demand price snapshot kerf ships, from two public sources.

AWS's public Price List bulk files (no credentials: https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/
current/...): for each region it streams the region's EC2 offer file (CSV) and keeps the hourly on-demand price of
every instance type for Linux, shared tenancy, no pre-installed software, "Used" capacity — the price of the
instances kerf launches.

Karpenter's static price snapshot (aws/karpenter-provider-aws, pkg/providers/pricing/zz_generated.pricing_*.go):
Go files holding a map literal of region -> instance type -> on-demand price, read as data (`--karpenter-file`,
any number of times). Regions whose prices Karpenter keeps in CNY (the China regions, `cn-*`) are skipped: the
snapshot holds USD only.

Regions not asked for keep the prices the file has; with --only-new-regions a region the file already has is kept
as it is too, so a source only adds regions. The "source" member says, per region, where its prices came from and
when. Only the standard library is used.

    python3 catalog/prices.py                          # every region AWS lists (needs network)
    python3 catalog/prices.py --regions eu-west-1,us-west-2
    python3 catalog/prices.py --offer-file index.csv --region eu-west-1   # an offer file already downloaded
    # Karpenter's files (pkg/providers/pricing/zz_generated.pricing_{aws,aws_us_gov,aws_cn}.go), new regions only:
    python3 catalog/prices.py --only-new-regions --karpenter-file zz_generated.pricing_aws_us_gov.go
    python3 catalog/prices.py --karpenter-file zz_generated.pricing_aws_us_gov.go --regions us-gov-west-1

The JSON keeps one type per line so that a refresh diffs readably.
"""
import argparse
import csv
import datetime
import io
import json
import math
import os
import re
import sys
import tempfile
import urllib.request

PRICING = "https://pricing.us-east-1.amazonaws.com"
REGION_INDEX = PRICING + "/offers/v1.0/aws/AmazonEC2/current/region_index.json"
SNAPSHOT = "catalog/on-demand-prices.json"

# The columns a row must hold, and the value each must have, for the price of a kerf node.
WANTED = {
    "TermType": "OnDemand",
    "Product Family": "Compute Instance",
    "Operating System": "Linux",
    "Tenancy": "Shared",
    "Pre Installed S/W": "NA",
    "CapacityStatus": "Used",
    "License Model": "No License required",
    "Unit": "Hrs",
}

# How the "source" member begins; then, per source and date, the regions it priced (see source_text).
SOURCE_PREFIX = "AWS public on-demand Linux prices (USD per hour): "
# The "source" member as this script wrote it before it recorded a source per region.
LEGACY_SOURCE = re.compile(r"AWS public on-demand Linux prices \(USD per hour\), snapshot (?P<date>[^\s;()]+)")
# One "<where from>, snapshot <date> (<region>, <region>)" group of the "source" member.
SOURCE_GROUP = re.compile(r"(?P<what>.+), snapshot (?P<date>[^\s;()]+) \((?P<regions>[^()]*)\)")
PRICE_LIST = "AWS Price List offer files"
KARPENTER = "Karpenter's static price snapshot (aws/karpenter-provider-aws)"
UNRECORDED = "source not recorded"

# Region prefixes whose prices Karpenter's files hold in another currency than USD: its pricing provider reads
# the CNY price of the China regions. The snapshot holds USD only, so those regions are skipped.
NON_USD_PREFIXES = {"cn-": "CNY"}

REGION_NAME = re.compile(r"[a-z]{2}(?:-[a-z]+)+-[0-9]+")
TYPE_NAME = re.compile(r"[a-z0-9][a-z0-9-]*\.[a-z0-9-]+")
# The tokens of a Go source file, as far as a generated price file needs: comments, strings, numbers, names and
# punctuation. Anything else is one OTHER character (harmless outside a region's block, an error inside one).
GO_TOKEN = re.compile(
    r"""(?P<space>[ \t\r\n]+)"""
    r"""|(?P<comment>//[^\n]*|/\*.*?\*/)"""
    r"""|(?P<string>"(?:[^"\\\n]|\\.)*"|`[^`]*`)"""
    # A number and whatever letters stick to it (0x10, 1_000, 1e-3): float() decides whether it is one.
    r"""|(?P<number>(?:[0-9]|\.[0-9])(?:[eE][+-]|[0-9A-Za-z_.])*)"""
    r"""|(?P<name>[A-Za-z_][A-Za-z0-9_.]*)"""
    r"""|(?P<punct>[{}\[\]():,=])"""
    r"""|(?P<other>.)""",
    re.DOTALL,
)
GENERATED_AT = re.compile(r"//\s*generated at ([0-9]{4}-[0-9]{2}-[0-9]{2})")


class Malformed(ValueError):
    """A Karpenter price file this script cannot read, with the line where reading stopped."""

    def __init__(self, line, message):
        super().__init__(f"line {line}: {message}")


def prices_of(lines):
    """Instance type -> USD per hour, from the lines of an offer CSV (its metadata lines first)."""
    rows = csv.reader(lines)
    header = None
    for row in rows:
        # The file starts with a few "FormatVersion", "Disclaimer", ... lines before the column names.
        if "SKU" in row and "PricePerUnit" in row:
            header = row
            break
    if header is None:
        raise ValueError("no header row with SKU and PricePerUnit: not an EC2 offer file")
    column = {name: i for i, name in enumerate(header)}
    missing = [name for name in list(WANTED) + ["Instance Type", "PricePerUnit"] if name not in column]
    if missing:
        raise ValueError(f"the offer file lacks the columns {missing}")
    prices = {}
    for row in rows:
        if len(row) != len(header):
            continue
        if any(row[column[name]] != value for name, value in WANTED.items()):
            continue
        instance_type = row[column["Instance Type"]]
        try:
            price = float(row[column["PricePerUnit"]])
        except ValueError:
            continue
        # A zero price is a placeholder (reserved-capacity rows that slipped through), never a real one.
        if instance_type and price > 0:
            prices[instance_type] = min(price, prices.get(instance_type, price))
    return prices


def go_tokens(text):
    """(kind, text, line) of every token of Go source `text` but spaces and comments."""
    line = 1
    for match in GO_TOKEN.finditer(text):
        kind, value = match.lastgroup, match.group()
        if kind == "other" and value == '"':
            raise Malformed(line, "a string that does not end on its line")
        if kind == "other" and value == "/" and text.startswith("/*", match.start()):
            raise Malformed(line, "a /* comment that never ends")
        if kind not in ("space", "comment"):
            yield kind, value, line
        line += value.count("\n")


def karpenter_prices(text):
    """Region -> instance type -> price, and the date the file says it was generated (or None), of one of
    Karpenter's generated price files: a Go map literal `"<region>": {"<type>": <price>, ...}, ...`."""
    tokens = list(go_tokens(text))
    regions = {}
    i = 0

    def token(at):
        return tokens[at] if at < len(tokens) else ("end", "end of file", tokens[-1][2] if tokens else 1)

    while i < len(tokens):
        kind, value, line = tokens[i]
        # A region's block opens with `"<region>": {`; other tokens outside the blocks (package, imports, the
        # map's type, the closing brace) carry no prices.
        if kind != "string" or token(i + 1)[1] != ":":
            i += 1
            continue
        name = value[1:-1]
        if not REGION_NAME.fullmatch(name):
            raise Malformed(line, f"{value} is not a region name")
        if token(i + 2)[1] != "{":
            raise Malformed(token(i + 2)[2], f"expected {{ after {value}:, found {token(i + 2)[1]!r}")
        if name in regions:
            raise Malformed(line, f"region {name} appears twice")
        prices = regions[name] = {}
        i += 3
        while True:
            kind, value, line = token(i)
            if value == "}" and kind == "punct":
                if not prices:
                    raise Malformed(line, f"region {name} has no prices")
                i += 1
                break
            if kind != "string":
                raise Malformed(line, f"expected an instance type or }} in region {name}, found {value!r}")
            instance_type = value[1:-1]
            if not TYPE_NAME.fullmatch(instance_type):
                raise Malformed(line, f"{value} is not an instance type name")
            if token(i + 1)[1] != ":":
                raise Malformed(token(i + 1)[2], f"expected : after {value}, found {token(i + 1)[1]!r}")
            kind, number, line = token(i + 2)
            if kind != "number":
                raise Malformed(line, f"expected the price of {instance_type}, found {number!r}")
            try:
                price = float(number)
            except ValueError:
                price = math.nan
            if not math.isfinite(price) or price <= 0:
                raise Malformed(line, f"the price of {instance_type} is {number}, not a positive number")
            if instance_type in prices:
                raise Malformed(line, f"{instance_type} appears twice in region {name}")
            prices[instance_type] = price
            i += 3
            kind, value, line = token(i)
            if value == ",":
                i += 1
            elif value != "}":
                raise Malformed(line, f"expected , or }} after the price of {instance_type}, found {value!r}")
    if not regions:
        raise ValueError('no `"<region>": {` block: not one of Karpenter\'s generated price files')
    generated = GENERATED_AT.search(text)
    return regions, generated.group(1) if generated else None


def fetch_lines(url):
    response = urllib.request.urlopen(url, timeout=120)
    return io.TextIOWrapper(response, encoding="utf-8")


def region_urls():
    with urllib.request.urlopen(REGION_INDEX, timeout=60) as response:
        index = json.load(response)
    return {
        region: PRICING + entry["currentVersionUrl"].replace("/index.json", "/index.csv")
        for region, entry in index["regions"].items()
    }


def provenance(source, regions):
    """Region -> (where from, date) as the "source" member `source` of a snapshot with `regions` says."""
    known = {}
    source = source if isinstance(source, str) else ""
    legacy = LEGACY_SOURCE.fullmatch(source)
    if legacy:
        # Written before the source was kept per region: every region came from the Price List.
        return {region: (PRICE_LIST, legacy.group("date")) for region in regions}
    if source.startswith(SOURCE_PREFIX):
        for group in source[len(SOURCE_PREFIX):].split("; "):
            match = SOURCE_GROUP.fullmatch(group)
            if match:
                for region in match.group("regions").split(", "):
                    known[region] = (match.group("what"), match.group("date"))
    return {region: known.get(region, (UNRECORDED, "unknown")) for region in regions}


def source_text(origins):
    """The "source" member for region -> (where from, date): one group per source and date."""
    groups = {}
    for region in sorted(origins):
        groups.setdefault(origins[region], []).append(region)
    parts = [f"{what}, snapshot {date} ({', '.join(regions)})" for (what, date), regions in groups.items()]
    return SOURCE_PREFIX + "; ".join(parts)


def write(path, regions, source):
    lines = ["{", '"onDemandUsdPerHour": {']
    names = sorted(regions)
    for r, region in enumerate(names):
        lines.append(f'"{region}": {{')
        types = sorted(regions[region].items())
        for t, (name, price) in enumerate(types):
            comma = "," if t + 1 < len(types) else ""
            lines.append(f'"{name}": {price!r}{comma}')
        lines.append("}," if r + 1 < len(names) else "}")
    lines.append("},")
    lines.append(f'"source": {json.dumps(source)}')
    lines.append("}")
    # A new file renamed over the old one: an interrupted run leaves the snapshot as it was.
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".prices-", suffix=".json")
    try:
        try:
            mode = os.stat(path).st_mode & 0o777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(temporary, mode)
        with os.fdopen(fd, "w") as out:
            out.write("\n".join(lines) + "\n")
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--regions", help="comma-separated regions (default: every region AWS lists, or every region "
                    "the --karpenter-file files hold)")
    ap.add_argument("--offer-file", help="a downloaded offer CSV of one region (with --region)")
    ap.add_argument("--region", help="the region of --offer-file")
    ap.add_argument("--karpenter-file", action="append", default=[], metavar="PATH",
                    help="one of Karpenter's generated Go price files (zz_generated.pricing_*.go); repeatable")
    ap.add_argument("--only-new-regions", action="store_true",
                    help="add only regions the snapshot lacks; a region it has keeps its prices and source")
    ap.add_argument("--out", default=SNAPSHOT, help=f"the snapshot to update (default {SNAPSHOT})")
    ap.add_argument("--date", help="the snapshot's date (default today, UTC; for a Karpenter file, the date it was "
                    "generated, from its header)")
    args = ap.parse_args(argv)
    try:
        with open(args.out) as f:
            snapshot = json.load(f)
    except FileNotFoundError:
        snapshot = {}
    current = snapshot.get("onDemandUsdPerHour", {})
    origins = provenance(snapshot.get("source"), current)
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    wanted = args.regions.split(",") if args.regions else None
    # Region -> its fresh prices, and region -> (where from, date).
    fresh, fresh_origins = {}, {}
    if args.offer_file:
        if not args.region:
            ap.error("--offer-file needs --region")
        with open(args.offer_file, newline="") as f:
            try:
                fresh = {args.region: prices_of(f)}
            except ValueError as e:
                sys.exit(f"{args.offer_file}: {e}")
        fresh_origins[args.region] = (PRICE_LIST, args.date or today)
    for path in args.karpenter_file:
        try:
            with open(path, encoding="utf-8") as f:
                regions, generated = karpenter_prices(f.read())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            sys.exit(f"{path}: {e}; the snapshot is left as it was")
        for region, prices in sorted(regions.items()):
            if wanted is not None and region not in wanted:
                continue
            currency = next((c for prefix, c in NON_USD_PREFIXES.items() if region.startswith(prefix)), None)
            if currency:
                print(f"{region}: skipped: Karpenter's prices there are in {currency}, the snapshot holds USD",
                      file=sys.stderr)
                continue
            if region in fresh:
                sys.exit(f"{path}: {region} is priced by another source too; the snapshot is left as it was")
            fresh[region] = prices
            fresh_origins[region] = (KARPENTER, args.date or generated or today)
    if args.karpenter_file and wanted is not None:
        missing = [r for r in wanted if r not in fresh and not any(r.startswith(p) for p in NON_USD_PREFIXES)]
        if missing:
            sys.exit(f"no --karpenter-file holds the regions {missing}; the snapshot is left as it was")
    if not args.offer_file and not args.karpenter_file:
        urls = region_urls()
        wanted = wanted or sorted(urls)
        unknown = [r for r in wanted if r not in urls]
        if unknown:
            ap.error(f"regions AWS does not list: {unknown}")
        for region in wanted:
            print(f"{region}: {urls[region]}", file=sys.stderr)
            fresh[region] = prices_of(fetch_lines(urls[region]))
            fresh_origins[region] = (PRICE_LIST, args.date or today)
    for region, prices in fresh.items():
        if not prices:
            sys.exit(f"{region}: no on-demand Linux prices found; the snapshot is left as it was")
    if args.only_new_regions:
        for region in sorted(set(fresh) & set(current)):
            print(f"{region}: kept as it was (--only-new-regions)", file=sys.stderr)
            del fresh[region]
    current.update(fresh)
    origins.update((region, fresh_origins[region]) for region in fresh)
    write(args.out, current, source_text(origins))
    for region, prices in sorted(fresh.items()):
        print(f"{region}: {len(prices)} instance types", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
