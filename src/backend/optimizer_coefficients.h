// The per-step scalars the optimizer kernel tables take (backend-neutral: every device's kernel
// receives the same values, computed once by optim/).
#pragma once

namespace headroom {

// The step's scalars, each rounded to float from the double the optimizer computes, as PyTorch
// turns its Python-float scalars into the tensor's dtype. See Note [AdamW order of operations].
struct AdamWCoefficients {
  float decay;  // 1 - lr * weight_decay
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^step)
};

// The step's scalars in fp32, as bitsandbytes' kernels receive and compute them:
// correction2 = sqrt(1 - beta2^step), step_size = -lr * correction2 / (1 - beta1^step),
// decay = 1 - lr * weight_decay. See Note [bitsandbytes AdamW order of operations].
struct BnbAdamCoefficients {
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float eps_correction2;  // eps * correction2
  float step_size;
  float decay;
};

// The step's scalars in fp32, as bitsandbytes' kernels receive and compute them (lr, betas and
// weight_decay are fp32 kernel arguments; 1 - beta and 1 - lr*wd are computed in fp32).
struct BnbLionCoefficients {
  float lr;
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float decay;  // 1 - lr * weight_decay
  bool decays;  // weight_decay > 0: only then does the kernel multiply (and round)
};

}  // namespace headroom
