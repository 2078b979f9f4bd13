#pragma once
// The sub-commands of the `starzero` program. Each takes the arguments after its own name
// (argv[0] is the sub-command name) and returns the process exit code: 0 on success, 2 on bad
// input (after a one-line error on stderr), 1 on a failure while running.
namespace starzero {
int plan_main(int argc, char** argv);
int train_main(int argc, char** argv);
struct RunMeasurements;  // train/run.hpp
// `starzero train` that also measures what *measurements holds (`starzero calibrate`).
int train_main(int argc, char** argv, RunMeasurements* measurements);
int eval_main(int argc, char** argv);
int bench_main(int argc, char** argv);
int bench_adam_main(int argc, char** argv);  // `starzero bench adam`
int consolidate_main(int argc, char** argv);
int convert_main(int argc, char** argv);  // `starzero convert --from hf DIR --to llmc FILE` and back
int trace_main(int argc, char** argv);  // `starzero trace DIR`
int sweep_main(int argc, char** argv);  // `starzero sweep ... -- train ...`
int plot_main(int argc, char** argv);   // `starzero plot FILE.jsonl --out FILE.svg`
int platform_main(int argc, char** argv);  // `starzero platform NAME --out DIR`
int calibrate_main(int argc, char** argv);  // `starzero calibrate --out DIR [train options]`
int tokenize_main(int argc, char** argv);   // `starzero tokenize --data FILE.jsonl --tokenizer FILE --out DIR`
}  // namespace starzero
