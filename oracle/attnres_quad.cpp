// The Attention Residuals oracle instantiated for quad.
#include "oracle/attnres_impl.hpp"

namespace fc::oracle {

template AttnResPhase1<quad> attnres_phase1_forward<quad>(const AttnResShape&, std::span<const quad>, std::span<const quad>);
template std::vector<quad> attnres_phase2_forward<quad>(const AttnResShape&, std::span<const quad>, std::span<const quad>,
                                                    std::span<const quad>, std::span<const quad>);
template AttnResPhase2Grads<quad> attnres_phase2_backward<quad>(const AttnResShape&, std::span<const quad>, std::span<const quad>,
                                                            std::span<const quad>, std::span<const quad>, std::span<const quad>);
template AttnResPhase1Grads<quad> attnres_phase1_backward<quad>(const AttnResShape&, std::span<const quad>, std::span<const quad>,
                                                            std::span<const quad>, std::span<const quad>);
template std::vector<quad> attnres_forward<quad>(const AttnResShape&, std::span<const quad>, std::span<const quad>,
                                             std::span<const quad>);
template AttnResGrads<quad> attnres_backward<quad>(const AttnResShape&, std::span<const quad>, std::span<const quad>,
                                               std::span<const quad>, std::span<const quad>);

}  // namespace fc::oracle
