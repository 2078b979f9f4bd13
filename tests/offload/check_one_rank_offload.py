#!/usr/bin/env python3
"""The checks of one_rank_offload_test.sh, each a subcommand: check_one_rank_offload.py NAME ARGS... exits non-zero when it fails.
"""
import json
import re
import sys


def device_windows():
    """LOG PLAN_JSON: the device windows the run reports are the plan's."""
    log = open(sys.argv[1]).read()
    plan = json.load(open(sys.argv[2]))["plans"][0]
    m = re.search(r"parameters peak (\d+) bytes, (\d+) layers \(prefetch window W\+1 = (\d+)\); gradients streamed, "
                  r"peak (\d+) bytes \(gradient window G = (\d+)\)", log)
    assert m, "no in-flight line in the placement report"
    params, layers, window, grads, G = map(int, m.groups())
    print(f"  device in flight: parameters {params} bytes in {layers} layers (plan {plan['gpu']['temporaries']}), "
          f"gradients {grads} bytes (plan {plan['gpu']['grads_in_flight']})")
    assert (layers, window, G) == (2, 2, 2), (layers, window, G)
    assert params == plan["gpu"]["temporaries"], (params, plan["gpu"]["temporaries"])
    assert grads == plan["gpu"]["grads_in_flight"], (grads, plan["gpu"]["grads_in_flight"])
    # Held for good: nothing of the model states on the device, all of them on the host.
    rows = dict((p, list(map(int, r))) for p, *r in
                re.findall(r"^\s+0\s+(device|host|disk)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|", log, re.M))
    assert rows["device"] == [0, 0, 0], rows
    assert rows["host"] == [round(plan["host"][k]) for k in ("params", "grads", "optimizer")], (rows, plan["host"])


CHECKS = {"device-windows": device_windows}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    sys.argv = [sys.argv[0]] + sys.argv[2:]
    sys.exit(check())
