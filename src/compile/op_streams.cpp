#include "compile/op_streams.h"

#include <vector>

namespace kiln {

void place_op_streams(Program& program) {
  const bool gpu = program.options.device == Device::CUDA;
  for (std::vector<Op>* ops : {&program.refresh_copies, &program.forward, &program.backward, &program.update,
                               &program.inference})
    for (Op& op : *ops) op.side_work_outlives = gpu && op.side_work_outlives;
}

}  // namespace kiln
