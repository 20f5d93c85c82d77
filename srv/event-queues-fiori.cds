using { EventQueuesService as ops } from './event-queues';

// Fiori elements list reports over the operations service work without further annotations.

annotate ops.DeadOutboxMessages with @(
  UI.HeaderInfo       : {
    TypeName       : 'Dead Letter',
    TypeNamePlural : 'Dead Letters',
    Title          : { Value: target },
    Description    : { Value: ID }
  },
  UI.SelectionFields  : [target, service, event, task, lastAttemptTimestamp],
  UI.LineItem         : [
    { Value: target, Label: 'Queue' },
    { Value: service, Label: 'Service' },
    { Value: event, Label: 'Event' },
    { Value: task, Label: 'Task' },
    { Value: timestamp, Label: 'Enqueued' },
    { Value: attempts, Label: 'Attempts' },
    { Value: lastAttemptTimestamp, Label: 'Last Attempt' },
    { Value: lastError, Label: 'Last Error' },
    { $Type: 'UI.DataFieldForAction', Action: 'EventQueuesService.revive', Label: 'Revive' },
    { $Type: 'UI.DataFieldForAction', Action: 'EventQueuesService.delete', Label: 'Delete' }
  ],
  UI.Identification   : [
    { $Type: 'UI.DataFieldForAction', Action: 'EventQueuesService.revive', Label: 'Revive' },
    { $Type: 'UI.DataFieldForAction', Action: 'EventQueuesService.delete', Label: 'Delete' }
  ],
  UI.FieldGroup #Message : { Data: [
    { Value: ID, Label: 'Message ID' },
    { Value: target, Label: 'Queue' },
    { Value: service, Label: 'Service' },
    { Value: event, Label: 'Event' },
    { Value: task, Label: 'Task' },
    { Value: timestamp, Label: 'Enqueued' },
    { Value: attempts, Label: 'Attempts' },
    { Value: lastAttemptTimestamp, Label: 'Last Attempt' },
    { Value: lastError, Label: 'Last Error' },
    { Value: msg, Label: 'Message' }
  ]},
  UI.Facets           : [{ $Type: 'UI.ReferenceFacet', Label: 'Message', Target: '@UI.FieldGroup#Message' }]
);

annotate ops.PendingOutboxMessages with @(
  UI.HeaderInfo      : {
    TypeName       : 'Pending Message',
    TypeNamePlural : 'Pending Messages',
    Title          : { Value: target },
    Description    : { Value: ID }
  },
  UI.SelectionFields : [target, service, event, status, task],
  UI.LineItem        : [
    { Value: target, Label: 'Queue' },
    { Value: service, Label: 'Service' },
    { Value: event, Label: 'Event' },
    { Value: task, Label: 'Task' },
    { Value: waitingSince, Label: 'Waiting Since' },
    { Value: dueAt, Label: 'Due' },
    { Value: attempts, Label: 'Attempts' },
    { Value: status, Label: 'Status' },
    { Value: claimedBy, Label: 'Processed By' },
    { Value: lastError, Label: 'Last Error' }
  ]
);
