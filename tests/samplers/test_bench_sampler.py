"""scripts/bench_sampler.py runs end to end on a small random graph: every method's row
prints, each floor line is the sum of its two measured CPU times over the threads, and
--json saves the results."""
import json
import re


def test_bench_sampler_prints_every_method_and_its_floor(load_script, capsys, threads_restored,
                                                         tmp_path):
    bench = load_script("bench_sampler")
    saved = tmp_path / "out" / "sampler.json"
    result = bench.main(["--nodes", "20000", "--degree", "8", "--batches", "2", "--warmup", "1",
                         "--threads", "2", "--json", str(saved)])
    assert json.loads(saved.read_text())["median_cpu_s"] == result["median_cpu_s"]
    out = capsys.readouterr().out
    for method in ("fused sample+gather (default)", "fused, float16 features",
                   "fused, phases in sequence", "plain: sample, index_select (out=)",
                   "ceiling: numpy.take(out=)"):
        assert f"| {method}" in out
    cpu = result["median_cpu_s"]
    for dtype, gather_key in (("float32", "index_select_out"),
                              ("float16", "index_select_out_fp16")):
        line = next(line for line in out.splitlines() if line.startswith(f"floor, {dtype}:"))
        sample, gather, total, per_core = map(float, re.findall(
            r"features ([\d.]+) \+ gather \(index_select\(out=\)\) ([\d.]+) ms CPU = ([\d.]+) "
            r"ms CPU per batch, / 2 cores = ([\d.]+) ms", line)[0])
        assert sample == round(cpu["sample_only"] * 1e3, 1)
        assert gather == round(cpu[gather_key] * 1e3, 1)
        assert abs(total - (sample + gather)) <= 0.11
        assert abs(per_core - total / 2) <= 0.06
