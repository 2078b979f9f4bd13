#pragma once
// Task names as StarPU needs them: StarPU keeps the `const char*` given with STARPU_NAME (it
// does not copy it), and the Paje trace format splits on white space, so a name must live for
// the whole process and contain no blanks.
#include <string_view>

namespace starzero {

// Returns a process-lifetime copy of `name` with every blank replaced by '_'. Thread-safe; each
// distinct name is stored once (names like "fwd[3]" repeat every step).
const char* intern_task_name(std::string_view name);

}  // namespace starzero
