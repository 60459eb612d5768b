"""The figures of assets/README.md's "What takes the room" and its packed-dump count."""
import lzma, subprocess
from pathlib import Path
A = Path("assets")
files = [p for p in A.rglob("*") if p.is_file()]
size = lambda ps: sum(p.stat().st_size for p in ps) / 1e6
ck = [p for p in files if p.parts[1] == "checkpoints"]
final = [p for p in files if p.parts[1] == "results" and "final" in p.parts]
rung = [p for p in final if "basic-skills-arithmetic-verify-pairs" in p.parts]
xz = [p for p in files if p.name.endswith(".jsonl.xz")]
reports = [p for p in files if p.suffix == ".html" or p.name.endswith(".js")]
rest = set(files) - set(ck) - set(final) - set(xz) - set(reports)
print(f"total {size(files):.2f} MB, {len(files)} files; checkpoints {size(ck):.1f}; final {size(final):.1f} (rung {size(rung):.1f}, others {size(set(final)-set(rung)):.1f}); xz {size(xz):.1f}; reports {size(reports):.1f}; rest {size(rest):.1f}")
plain = sum(len(lzma.decompress(p.read_bytes())) for p in xz)
print(f"{len(xz):,} files, {plain/1e6:.1f} MB as text, {size(xz):.1f} MB packed")
print(subprocess.run(["du", "-sm", "assets"], capture_output=True, text=True).stdout)
import gzip
gz = sum(len(gzip.compress(lzma.decompress(p.read_bytes()), 9)) for p in xz)
print(f"gzip -9: {gz/1e6:.1f} MB")
rf = [p for p in rung]
print("rung adapter", size(rf), [p.name for p in rf])
