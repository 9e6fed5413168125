// Measured choice of an algorithm's tile config and split (benchmark mode, torchconv.set_benchmark): the first call
// with a shape times the candidates and remembers the winner for that shape, dtype and GPU; later
// calls look it up. Off by default (a rule picks). The choices live for the process.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torchconv {

bool tuning_enabled();
void set_tuning_enabled(bool on);

// The tuned choice for `key` (which names the shape, dtype and GPU), if one was recorded.
bool tuned_choice(const std::string& key, std::string* choice);
void record_tuned_choice(const std::string& key, const std::string& choice);
int64_t tuned_choice_count();
// Every recorded (key, choice), for torchconv.save_cache.
std::vector<std::pair<std::string, std::string>> tuned_choice_list();
void clear_tuned_choices();
// Bumped by clear_tuned_choices: an algorithm's own fast look-up of tuned plans drops itself when
// this changes, so a clear really forgets every plan.
int64_t tuned_choices_generation();

// The plans of the last call in the process, per pass ("forward:wide/splits=8
// grad_input:medium/splits=2 grad_weight:pixels/splits=64"), for the benchmark's config column; a
// forward clears the others. Raw values are stored; the text is built only when asked.
void record_last_choice(const char* pass, const char* config, int splits);
// Sets the split count of `pass`'s entry (for launchers that decide it after the config).
void record_last_splits(const char* pass, int splits);
// Notes that only the tiles of `pass`'s last wave split their reduction, shown as "/tail" after the
// splits.
void record_last_tail_splits(const char* pass);
// Notes where `pass`'s filter operand came from (the GEMM: "weight" read in place, "matrix" re-laid
// out), shown as "/a=<source>" after the splits.
void record_last_operand(const char* pass, const char* source);
std::string last_choice();

}  // namespace torchconv
