"""Benchmark: time to calibrate the free noise multiplier for T_max = 100 (target: < 2 s).

Run: .venv/bin/python bench/calibration.py
Settings: the AdaDPSyn paper's AG News shape (M = 10, N = 2, T_max = 100, one shot per label,
a label partition of 2,600 of 10,429 records, delta = 1/|D|), epsilon in {1, 4, 8}.
"""

from __future__ import annotations

import statistics
import sys
import time

from app.privacy.accounting import Accounting
from app.privacy.calibration import calibrate_noise
from app.privacy.params import AdaDPSynParams, TangParams
from app.privacy.synthesis import SynthesisPrivacy

TARGET_SECONDS = 2.0
SIZES, SHOTS, DELTA = {"World": 2600}, {"World": 1}, 1 / 10429


def main() -> int:
    worst = 0.0
    print(f"{'method':9} {'accounting':10} {'epsilon':>7} {'multiplier':>10} {'seconds':>8}")
    for params in (TangParams(sigma=1.0), AdaDPSynParams(sigma0=10, sigma1=1.0, sigma2=3, T=2)):
        for accounting in Accounting:
            privacy = SynthesisPrivacy(params=params, accounting=accounting, M=10, N=2, tmax=100)
            for target in (1.0, 4.0, 8.0):
                times = []
                for _ in range(3):
                    start = time.perf_counter()
                    result = calibrate_noise(
                        privacy, label_sizes=SIZES, shots=SHOTS, target_epsilon=target, delta=DELTA
                    )
                    times.append(time.perf_counter() - start)
                seconds = statistics.median(times)
                worst = max(worst, seconds)
                print(
                    f"{privacy.aggregator.value:9} {accounting.value:10} {target:7.1f} "
                    f"{result.multiplier:10.4f} {seconds:8.3f}"
                )
    verdict = "meets" if worst < TARGET_SECONDS else "MISSES"
    print(f"slowest median: {worst:.3f} s ({verdict} the {TARGET_SECONDS:.0f} s target)")
    return 0 if worst < TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
