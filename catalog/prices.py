#!/usr/bin/env python3
"""Refreshes catalog/on-demand-prices.json, the on-demand price snapshot kerf ships, from AWS's public Price List
bulk files (no credentials: https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/...).

For each region it streams the region's EC2 offer file (CSV) and keeps the hourly on-demand price of every
instance type for Linux, shared tenancy, no pre-installed software, "Used" capacity — the price of the instances
kerf launches. Regions not asked for keep the prices the file has. Only the standard library is used.

    python3 catalog/prices.py                          # every region AWS lists (needs network)
    python3 catalog/prices.py --regions eu-west-1,us-west-2
    python3 catalog/prices.py --offer-file index.csv --region eu-west-1   # an offer file already downloaded

The JSON keeps one type per line so that a refresh diffs readably.
"""
import argparse
import csv
import datetime
import io
import json
import sys
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
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--regions", help="comma-separated regions (default: every region AWS lists)")
    ap.add_argument("--offer-file", help="a downloaded offer CSV of one region (with --region)")
    ap.add_argument("--region", help="the region of --offer-file")
    ap.add_argument("--out", default=SNAPSHOT, help=f"the snapshot to update (default {SNAPSHOT})")
    ap.add_argument("--date", help="the snapshot's date (default today, UTC)")
    args = ap.parse_args(argv)
    try:
        with open(args.out) as f:
            current = json.load(f).get("onDemandUsdPerHour", {})
    except FileNotFoundError:
        current = {}
    if args.offer_file:
        if not args.region:
            ap.error("--offer-file needs --region")
        with open(args.offer_file, newline="") as f:
            try:
                fresh = {args.region: prices_of(f)}
            except ValueError as e:
                sys.exit(f"{args.offer_file}: {e}")
    else:
        urls = region_urls()
        wanted = args.regions.split(",") if args.regions else sorted(urls)
        unknown = [r for r in wanted if r not in urls]
        if unknown:
            ap.error(f"regions AWS does not list: {unknown}")
        fresh = {}
        for region in wanted:
            print(f"{region}: {urls[region]}", file=sys.stderr)
            fresh[region] = prices_of(fetch_lines(urls[region]))
    for region, prices in fresh.items():
        if not prices:
            sys.exit(f"{region}: no on-demand Linux prices found; the snapshot is left as it was")
    current.update(fresh)
    date = args.date or datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    source = f"AWS public on-demand Linux prices (USD per hour), snapshot {date}"
    write(args.out, current, source)
    for region, prices in sorted(fresh.items()):
        print(f"{region}: {len(prices)} instance types", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
