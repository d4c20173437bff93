"""creditaudit.ledger"""
