"""StarPU's task records (tasks.rec of a traced run), for the shell tests' graph checks."""


def records(path, terminated=False):
    """Each record of a .rec file (tasks.rec, durations.rec) as a dict of its fields, in file order;
    lines starting with # are comments. `terminated`: the file must end with a blank line, as
    StarPU's do once written whole."""
    blocks = open(path).read().split("\n\n")
    if terminated:
        assert not blocks[-1].strip(), f"{path}: unterminated last record"
    for block in blocks:
        fields = {}
        for line in block.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields:
            yield fields


def read(path):
    """The records, each a dict of its fields, keyed by JobId."""
    return {r["JobId"]: r for r in records(path) if "JobId" in r}


def ancestors(by_id, job):
    """Every task `job` depends on, directly or not (DependsOn)."""
    seen, todo = set(), [job]
    while todo:
        for dep in by_id.get(todo.pop(), {}).get("DependsOn", "").split():
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def update_order(by_id, name="adamw"):
    """Per iteration, the layers of the tasks named `name`[l] in the order they started."""
    runs = {}
    for r in by_id.values():
        if r.get("Name", "").startswith(name + "[") and "StartTime" in r:
            layer = int(r["Name"][len(name) + 1:-1])
            runs.setdefault(int(r.get("Iteration", 0)), []).append((float(r["StartTime"]), layer))
    return {it: [layer for _, layer in sorted(starts)] for it, starts in sorted(runs.items())}
