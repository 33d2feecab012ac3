// The emulated op libraries' one translation unit (ATen's headers are compiled once): the aclnn
// executor (aclnn_exec.inc), the aclnn ops (aclnn_ops.inc), aclopCompileAndExecute (aclop.inc).
#include "ops.h"

#include "aclnn_exec.inc"
#include "aclnn_ops.inc"
#include "aclop.inc"
