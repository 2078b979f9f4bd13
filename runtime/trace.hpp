#pragma once
// Turns the FxT file a traced Session leaves into the files ViTE and StarPU's tools read.
#include <string>

namespace starzero {

// Writes paje.trace (open it in ViTE), dag.dot, tasks.rec, data.rec, trace.rec, activity.data
// and distrib.data into out_dir (created if needed). Throws when fxt_file is missing or empty.
void convert_fxt_trace(const std::string& fxt_file, const std::string& out_dir);

}  // namespace starzero
