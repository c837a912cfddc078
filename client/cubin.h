// What a cubin says about itself: an ELF64 image for NVIDIA GPUs (e_machine EM_CUDA) whose header
// names the SM it was compiled for and whose symbol table lists its kernels. ktune::Kernel checks
// a served cubin with it before loading anything (a cubin for another arch, or without the entry
// it is said to hold, is refused with a clear error instead of failing inside the driver), and the
// tests check the kernel op's cubins with it. Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "protocol.h"

namespace ktune {

struct CubinInfo {
  int sm = 0;                        // e.g. 90 (sm_90 and sm_90a both say 90)
  std::vector<std::string> symbols;  // names in .symtab, in table order
  bool has_symbol(std::string_view name) const;
};

// Parses the ELF64 header, the section headers and .symtab/.strtab. `bad_request` naming what is
// wrong when the bytes are no CUDA ELF64 image.
protocol::Expected<CubinInfo> inspect_cubin(std::string_view bytes);

// The SM number of an arch string: "sm_90a" -> 90; 0 when it is not of that form.
int arch_sm(std::string_view arch);

}  // namespace ktune
