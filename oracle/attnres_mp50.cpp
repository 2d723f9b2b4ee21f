// The Attention Residuals oracle instantiated for mp50.
#include "oracle/attnres_impl.hpp"

namespace fc::oracle {

template AttnResPhase1<mp50> attnres_phase1_forward<mp50>(const AttnResShape&, std::span<const mp50>, std::span<const mp50>);
template std::vector<mp50> attnres_phase2_forward<mp50>(const AttnResShape&, std::span<const mp50>, std::span<const mp50>,
                                                    std::span<const mp50>, std::span<const mp50>);
template AttnResPhase2Grads<mp50> attnres_phase2_backward<mp50>(const AttnResShape&, std::span<const mp50>, std::span<const mp50>,
                                                            std::span<const mp50>, std::span<const mp50>, std::span<const mp50>);
template AttnResPhase1Grads<mp50> attnres_phase1_backward<mp50>(const AttnResShape&, std::span<const mp50>, std::span<const mp50>,
                                                            std::span<const mp50>, std::span<const mp50>);
template std::vector<mp50> attnres_forward<mp50>(const AttnResShape&, std::span<const mp50>, std::span<const mp50>,
                                             std::span<const mp50>);
template AttnResGrads<mp50> attnres_backward<mp50>(const AttnResShape&, std::span<const mp50>, std::span<const mp50>,
                                               std::span<const mp50>, std::span<const mp50>);

}  // namespace fc::oracle
